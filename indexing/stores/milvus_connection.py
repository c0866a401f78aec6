"""The process's clients of Milvus, one per URI, shared by every :class:`~indexing.stores.milvus.MilvusStore`
on it, and the typed errors of a failed request.

A client found unreachable is *stale*: the next request connects again (a restarted server is reached
without restarting the process) and forgets which collections were loaded. The last store on a URI to
close closes its client; for Milvus Lite that also stops its in-process server and frees its directory.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any

from core.errors import require
from indexing.errors import StoreError, StoreUnavailable
from indexing.stores.credentials import Credentials


def is_lite(uri: str) -> bool:
    """Whether ``uri`` is a local Milvus Lite path rather than a server address."""
    return "://" not in uri


class Connection:
    """One pymilvus client on one URI and the collections it has loaded; shared by the stores on that URI.

    After a request finds the server unreachable the connection is *stale*: the next request opens a
    new client first (and forgets what was loaded, since a restarted server may not have it loaded).
    """

    def __init__(self, uri: str, timeout_s: float) -> None:
        self.uri = uri
        self.timeout_s = timeout_s
        self.loaded: set[str] = set()
        self.lock = threading.Lock()
        self.load_lock = threading.Lock()
        """Held while collections load: a collection is in ``loaded`` only once its load returned, and a
        request that finds it missing waits for the load under way instead of searching it mid-load."""
        self.refs = 0
        self.closed = False
        self.stale = False
        self.client: Any = self._connect()

    def _connect(self) -> Any:
        pymilvus: Any = require("pymilvus", "milvus")
        # pymilvus pings every 10 s even when idle; Milvus Lite's gRPC server, embedded or in server
        # mode, keeps gRPC's default policy and answers such pings with GOAWAY (too_many_pings), which
        # drops the connection. Rare pings only on open calls are acceptable to every Milvus server.
        options = {"grpc.keepalive_time_ms": 600_000, "grpc.keepalive_permit_without_calls": False}
        # A server connection is this store's own (not pymilvus' shared one), so that reconnecting
        # replaces it without touching other clients of the process.
        # A server's user and password come from MILVUS_USER / MILVUS_PASSWORD or MILVUS_TOKEN (a Secret on
        # Kubernetes); Milvus Lite has no users.
        extra: dict[str, Any] = {}
        if not is_lite(self.uri):
            extra = {"dedicated": True, **Credentials.from_env("MILVUS").milvus_args()}
        try:
            return pymilvus.MilvusClient(uri=self.uri, grpc_options=options, timeout=self.timeout_s, **extra)
        except Exception as exc:
            raise milvus_error(exc, f"cannot connect to Milvus at {self.uri}") from None

    def current(self) -> Any:
        """The client, connecting again first if the last request found the server gone."""
        with self.lock:
            if self.stale and not self.closed:
                old, self.client = self.client, None
                with contextlib.suppress(Exception):
                    old.close()
                self.client = self._connect()  # raises StoreUnavailable while the server is down
                self.loaded.clear()
                self.stale = False
            return self.client

    def mark_stale(self) -> None:
        with self.lock:
            self.stale = True
            self.loaded.clear()

    def close(self) -> None:
        """Close the client; for Milvus Lite also stop its in-process server and free its directory."""
        self.closed = True
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        if is_lite(self.uri):
            manager: Any = require("milvus_lite.server_manager", "milvus")
            manager.server_manager_instance.release_server(self.uri)


_CONNECTIONS: dict[str, Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def acquire(uri: str, timeout_s: float) -> Connection:
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(uri)
        if conn is None:
            conn = Connection(uri, timeout_s)
            _CONNECTIONS[uri] = conn
        conn.refs += 1
        return conn


def release(conn: Connection) -> None:
    with _CONNECTIONS_LOCK:
        conn.refs -= 1
        last = conn.refs <= 0 and _CONNECTIONS.get(conn.uri) is conn
        if last:
            del _CONNECTIONS[conn.uri]
    if last:
        conn.close()


def open_connections() -> dict[str, int]:
    """URI -> number of open stores sharing its client (what is still open in this process)."""
    with _CONNECTIONS_LOCK:
        return {uri: conn.refs for uri, conn in _CONNECTIONS.items()}


_UNAVAILABLE_TEXT = re.compile(
    r"unavailable|deadline exceeded|retry timeout|fail(ed)? (to )?connect|connection refused|"
    r"socket closed|failed to connect|timed? ?out",
    re.IGNORECASE,
)


def milvus_error(exc: BaseException, what: str, code: str = "milvus") -> StoreError:
    """A typed error for a failed Milvus request: :class:`StoreUnavailable` when the server could not be
    reached or did not answer in time, else a :class:`StoreError` with ``code``."""
    message = " ".join(str(getattr(exc, "message", None) or exc).split())[:500]
    raw = getattr(exc, "code", None)
    status = raw() if callable(raw) else raw  # grpc.RpcError.code() is a method
    status_name = getattr(status, "name", None)
    unavailable = (
        status == 2  # pymilvus' CONNECT_FAILED
        or status_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        or type(exc).__name__ in ("MilvusUnavailableException", "ConnectError")
        or bool(_UNAVAILABLE_TEXT.search(message))
    )
    if unavailable:
        return StoreUnavailable(f"{what}: {message}")
    return StoreError(f"{what}: {message}", code=code)


def close_all() -> None:
    """Close every client of this process at once (frees Milvus Lite's directory for another process).

    Stores still holding one fail afterwards with ``store_closed``; meant for process shutdown and tests.
    """
    with _CONNECTIONS_LOCK:
        conns = list(_CONNECTIONS.values())
        _CONNECTIONS.clear()
    for conn in conns:
        conn.close()


release_vector_stores = close_all
"""The former name of :func:`close_all`."""
