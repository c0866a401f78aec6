"""What the project's HTTP services share: one-line JSON errors, request-validation messages, and a
uvicorn server in a background thread (tests, benches, or a process that embeds a service).

Every error body is ``{"error": <code>, "detail": <one line>}``; a 429 or 503 carries ``Retry-After``.
"""

from __future__ import annotations

import threading
from typing import Any

import uvicorn
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from indexing import processes
from indexing.errors import ProReError


class ServiceUnavailable(ProReError):
    """A service could not start or is not running."""

    code = "service_unavailable"
    retryable = True


def error_response(status: int, code: str, detail: str, retry_after: int | None = None) -> JSONResponse:
    """The one error shape: ``{"error": code, "detail": one line}``, with ``Retry-After`` when given."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"error": code, "detail": " ".join(detail.split())}, status_code=status, headers=headers)


def validation_line(exc: RequestValidationError) -> str:
    """The first problem of a request that failed validation, as one line (``items.0.domain: Field required``)."""
    errors = exc.errors()
    if not errors:
        return "the request body is not valid"
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc or 'body'}: {first.get('msg', 'invalid')}{more}"


class ServerThread:
    """Runs an ASGI app under uvicorn in a background thread on ``host:port`` (0: a free port)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "http-service") -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    @property
    def url(self) -> str:
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self, timeout_s: float = 120.0) -> ServerThread:
        """Start the thread and wait until uvicorn listens; :class:`ServiceUnavailable` if its thread ends
        first (the port is taken, the app's startup failed) or ``timeout_s`` passes."""
        self._thread.start()
        processes.wait_ready(
            lambda: self.server.started, what=f"the service ({self._thread.name})", timeout_s=timeout_s,
            poll_s=0.02, running=self._thread.is_alive, error=ServiceUnavailable,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=60)
