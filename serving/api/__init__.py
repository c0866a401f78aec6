"""The query API (``prore serve``): NL in, a program and ranked results out, with a fallback that always answers.

:mod:`serving.api.app` builds the ASGI app; :mod:`serving.api.server` holds the parts every HTTP service of
the project shares (one-line JSON errors, validation messages, a uvicorn server thread).
"""
