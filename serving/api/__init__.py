"""The query API (``prore serve``): NL in, a program and ranked results out, with a fallback that always answers.

:mod:`serving.api.app` builds the ASGI app (routes and the request envelope) over
:mod:`serving.api.service`, the search service without a web framework, which the KServe transformer uses
as well; :mod:`serving.api.schemas` holds the wire format and :mod:`serving.api.metrics` the Prometheus
metrics. What every HTTP service of the project shares (the app factory with its probes, one-line JSON
errors, the in-flight limit, a uvicorn server thread) is :mod:`serving.http`.
"""
