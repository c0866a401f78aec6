"""A uvicorn server in a background thread (tests, benches, or a process that embeds a service), for the
project's HTTP services (:mod:`serving.http.app`).
"""

from __future__ import annotations

import threading
from typing import Any

import uvicorn

from core import processes
from core.errors import ProReError


class ServiceUnavailable(ProReError):
    """A service could not start or is not running."""

    code = "service_unavailable"
    retryable = True


class ServerThread:
    """Runs an ASGI app under uvicorn in a background thread on ``host:port`` (0: a free port)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "http-service"
    ) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="on", access_log=False
        )
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
