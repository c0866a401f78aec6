"""Milvus through pymilvus' MilvusClient: a Milvus Lite directory in the workspace, or a server URI.

One collection per corpus version. Its fields:

* ``id``: VARCHAR primary key, so a re-sent row replaces the old one (upserts are idempotent);
* ``<field>_vec``: one FLOAT_VECTOR per text and image field of the schema;
* every structured field, mirrored as a scalar so filters can be pushed into vector search:
  strings as VARCHAR, ints as INT64, floats as DOUBLE, bools as BOOL, and **dates and datetimes
  as INT64 Unix epoch seconds (UTC; a date is its midnight)**, e.g. ``release_date >= 1704067200``.

Text fields are not mirrored: ClickHouse holds them. Milvus Lite runs in-process (pymilvus starts it
for a ``*.db`` path); ``milvus-lite server --data-dir DIR --port P`` serves the same engine over gRPC.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexing.config import Config, MilvusConfig
from indexing.errors import ConfigError, StoreError, StoreUnavailable, require
from indexing.schema import CorpusSchema, DType
from indexing.stores.base import Hit, Vectors
from indexing.workspace import Workspace

# Milvus Lite 3 builds these itself; the faiss-backed ones need faiss-cpu (checked at run time).
LITE_INDEX_TYPES = ("FLAT", "AUTOINDEX")
LITE_FAISS_INDEX_TYPES = ("HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8")
SERVER_INDEX_TYPES = (
    "FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "IVF_RABITQ", "HNSW", "HNSW_SQ", "HNSW_PQ", "HNSW_PRQ",
    "DISKANN", "SCANN", "AUTOINDEX", "GPU_CAGRA", "GPU_IVF_FLAT", "GPU_IVF_PQ", "GPU_BRUTE_FORCE",
)  # fmt: skip
METRICS = ("IP", "COSINE", "L2")
UPSERT_BATCH = 1000
"""Rows per upsert request: a few MB per gRPC message, far below its limit."""
VARCHAR_MAX = 4096


def vector_field(field: str) -> str:
    """Name of the Milvus vector field of schema field ``field``."""
    return f"{field}_vec"


def is_lite(uri: str) -> bool:
    """Whether ``uri`` is a local Milvus Lite path rather than a server address."""
    return "://" not in uri


def supported_index_types(lite: bool) -> tuple[str, ...]:
    """Index types this deployment can build (Milvus Lite: depends on faiss-cpu being installed)."""
    if not lite:
        return SERVER_INDEX_TYPES
    factory: Any = require("milvus_lite.index.factory", "milvus")
    return LITE_INDEX_TYPES + (LITE_FAISS_INDEX_TYPES if factory.is_faiss_available() else ())


def check_index_config(cfg: MilvusConfig, *, lite: bool) -> None:
    """Reject an index type or metric the target cannot build, naming the ones it can."""
    known = supported_index_types(lite)
    if cfg.index_type not in known:
        where = "Milvus Lite" if lite else "Milvus"
        raise ConfigError(
            f"index type {cfg.index_type!r} is not supported by {where}; choose one of {', '.join(known)}",
            code="index_type",
        )
    if cfg.metric_type not in METRICS:
        raise ConfigError(f"metric {cfg.metric_type!r} is not supported; choose one of {', '.join(METRICS)}")


class _Connection:
    """One pymilvus client on one URI and the collections it has loaded; shared by the stores on that URI."""

    def __init__(self, uri: str) -> None:
        pymilvus: Any = require("pymilvus", "milvus")
        # pymilvus pings every 10 s even when idle; Milvus Lite's gRPC server, embedded or in server
        # mode, keeps gRPC's default policy and answers such pings with GOAWAY (too_many_pings), which
        # drops the connection. Rare pings only on open calls are acceptable to every Milvus server.
        options = {"grpc.keepalive_time_ms": 600_000, "grpc.keepalive_permit_without_calls": False}
        try:
            self.client: Any = pymilvus.MilvusClient(uri=uri, grpc_options=options)
        except Exception as exc:
            raise _error(exc, f"cannot connect to Milvus at {uri}") from None
        self.uri = uri
        self.loaded: set[str] = set()
        self.lock = threading.Lock()
        self.refs = 0
        self.closed = False

    def close(self) -> None:
        """Close the client; for Milvus Lite also stop its in-process server and free its directory."""
        self.closed = True
        self.client.close()
        if is_lite(self.uri):
            manager: Any = require("milvus_lite.server_manager", "milvus")
            manager.server_manager_instance.release_server(self.uri)


_CONNECTIONS: dict[str, _Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def _acquire(uri: str) -> _Connection:
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(uri)
        if conn is None:
            conn = _Connection(uri)
            _CONNECTIONS[uri] = conn
        conn.refs += 1
        return conn


def _release(conn: _Connection) -> None:
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


class MilvusStore:
    """Collections of one corpus version each; see the module docstring for their fields.

    Every store on one URI shares the process's one client for it (reference-counted): the client
    is opened with the first store and closed, with Milvus Lite's in-process server, when the last
    store is closed. Close each store when done with it (``close()`` or a ``with`` block).
    """

    def __init__(self, uri: str, cfg: MilvusConfig | None = None) -> None:
        self.cfg = cfg or MilvusConfig()
        self.uri = uri
        self.lite = is_lite(uri)
        pymilvus: Any = require("pymilvus", "milvus")
        self._pm = pymilvus
        # Failures are re-raised as typed errors; pymilvus would also log each with a traceback.
        logging.getLogger("pymilvus.decorators").setLevel(logging.CRITICAL)
        if self.lite:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
        self._conn: _Connection | None = _acquire(uri)
        self._client = self._conn.client

    @property
    def closed(self) -> bool:
        return self._conn is None or self._conn.closed

    def create_collection(self, name: str, schema: CorpusSchema, dims: Mapping[str, int]) -> None:
        """Create ``name`` for ``schema`` unless it exists; ``dims`` maps each vector field to its size."""
        check_index_config(self.cfg, lite=self.lite)
        if self.has_collection(name):
            return
        dt = self._pm.DataType
        types = {DType.STRING: dt.VARCHAR, DType.INT: dt.INT64, DType.FLOAT: dt.DOUBLE, DType.BOOL: dt.BOOL}
        sch = self._pm.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        sch.add_field("id", dt.VARCHAR, is_primary=True, max_length=256)
        for fname in schema.structured_fields:
            if fname == "id":
                continue
            kind = types.get(schema.field(fname).dtype, dt.INT64)  # dates and datetimes: epoch seconds
            extra = {"max_length": VARCHAR_MAX} if kind == dt.VARCHAR else {}
            sch.add_field(fname, kind, **extra)
        params = self._client.prepare_index_params()
        for fname in schema.vector_fields:
            sch.add_field(vector_field(fname), dt.FLOAT_VECTOR, dim=int(dims[fname]))
            params.add_index(
                field_name=vector_field(fname),
                index_type=self.cfg.index_type,
                metric_type=self.cfg.metric_type,
                params=dict(self.cfg.index_params),
            )
        extra_args = {} if self.lite else {"shards_num": self.cfg.shards_num}
        self._call(lambda: self._client.create_collection(name, schema=sch, **extra_args))
        # pymilvus polls every index of a new collection with a 0.5 s sleep; on an empty collection
        # there is nothing to wait for (2 s per collection saved).
        self._call(lambda: self._client.create_index(name, params, sync=False))
        self._ensure_loaded(name)

    def upsert(self, name: str, schema: CorpusSchema, data: pa.Table, vectors: Mapping[str, Vectors]) -> None:
        """Insert or replace the rows of ``data`` (structured columns) with their ``vectors`` by field."""
        columns = {f: _milvus_values(data.column(f), schema.field(f).dtype) for f in schema.structured_fields}
        n = data.num_rows
        for f in schema.vector_fields:
            if vectors[f].shape[0] != n:
                raise StoreError(f"{vectors[f].shape[0]} vectors for {n} rows on field {f}")
        for start in range(0, n, UPSERT_BATCH):
            stop = min(start + UPSERT_BATCH, n)
            rows: list[dict[str, Any]] = []
            for i in range(start, stop):
                row: dict[str, Any] = {f: vals[i] for f, vals in columns.items()}
                for f in schema.vector_fields:
                    row[vector_field(f)] = vectors[f][i]
                rows.append(row)
            self._call(lambda rows=rows: self._client.upsert(name, rows))

    def search(
        self,
        collection: str,
        field: str,
        vectors: Vectors,
        k: int,
        *,
        filter: str | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` ids per row of ``vectors`` on schema field ``field``, all rows in one request."""
        if len(vectors) == 0:
            return []
        self._ensure_loaded(collection)
        params = {"metric_type": self.cfg.metric_type, "params": dict(self.cfg.search_params)}
        res = self._call(
            lambda: self._client.search(
                collection,
                data=[np.asarray(v, dtype=np.float32) for v in vectors],
                anns_field=vector_field(field),
                limit=k,
                filter=filter or "",
                output_fields=[],
                search_params=params,
            ),
            code="vector_search",
        )
        # L2 is a distance (lower is better); hits are scores (higher is better).
        sign = -1.0 if self.cfg.metric_type == "L2" else 1.0
        return [[(str(h["id"]), sign * float(h["distance"])) for h in hits] for hits in res]

    def fetch_vectors(self, collection: str, field: str, ids: Sequence[str]) -> dict[str, Vectors]:
        """Stored vectors of ``ids`` on schema field ``field``; unknown ids are absent from the result."""
        if not ids:
            return {}
        self._ensure_loaded(collection)
        name = vector_field(field)
        rows = self._call(lambda: self._client.get(collection, ids=list(ids), output_fields=[name]))
        return {str(r["id"]): np.asarray(r[name], dtype=np.float32) for r in rows}

    def count(self, collection: str) -> int:
        """Entities in ``collection`` (strongly consistent: counts what was written)."""
        self._ensure_loaded(collection)
        rows = self._call(
            lambda: self._client.query(collection, filter="", output_fields=["count(*)"], consistency_level="Strong")
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def has_collection(self, name: str) -> bool:
        return bool(self._call(lambda: self._client.has_collection(name)))

    def list_collections(self, prefix: str = "") -> list[str]:
        names = self._call(lambda: self._client.list_collections())
        return sorted(str(n) for n in names if str(n).startswith(prefix))

    def drop_collection(self, name: str) -> None:
        conn = self._open()
        with conn.lock:
            conn.loaded.discard(name)
        if self.has_collection(name):
            self._call(lambda: self._client.drop_collection(name))

    def flush(self, name: str) -> None:
        """Persist buffered writes (a no-op cost on Milvus Lite, a seal on a server)."""
        self._call(lambda: self._client.flush(name))

    def close(self) -> None:
        """Release this store's share of the client; the last store on a URI closes it. Twice is harmless."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _release(conn)

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> _Connection:
        if self._conn is None or self._conn.closed:
            raise StoreError(f"this Milvus store ({self.uri}) is closed", code="store_closed")
        return self._conn

    def _ensure_loaded(self, name: str) -> None:
        conn = self._open()
        with conn.lock:
            if name in conn.loaded:
                return
        self._call(lambda: self._client.load_collection(name))
        with conn.lock:
            conn.loaded.add(name)

    def _call(self, fn: Any, code: str = "milvus") -> Any:
        self._open()
        try:
            return fn()
        except Exception as exc:
            raise _error(exc, "Milvus", code) from None


def _error(exc: BaseException, what: str, code: str = "milvus") -> StoreError:
    message = " ".join(str(getattr(exc, "message", None) or exc).split())[:500]
    unavailable = getattr(exc, "code", None) == 2 or type(exc).__name__ in (
        "MilvusUnavailableException",
        "ConnectError",
    )
    if unavailable:
        return StoreUnavailable(f"{what}: {message}")
    return StoreError(f"{what}: {message}", code=code)


def epoch_seconds(value: date) -> int:
    """A date or datetime as the Milvus mirror stores it: Unix epoch seconds, UTC, a date at its midnight.

    The scalar twin of the vectorized conversion in :func:`_milvus_values`; filters use it.

    >>> epoch_seconds(date(2024, 1, 1))
    1704067200
    """
    moment = value if isinstance(value, datetime) else datetime(value.year, value.month, value.day)
    return int(moment.replace(tzinfo=UTC).timestamp())


def _milvus_values(col: pa.ChunkedArray, dtype: DType) -> list[Any]:
    if dtype is DType.DATE:
        days = pc.cast(col, pa.int32()).to_numpy()
        return list((days.astype(np.int64) * 86_400).tolist())
    if dtype is DType.DATETIME:
        return list(pc.cast(pc.cast(col, pa.timestamp("s")), pa.int64()).to_pylist())
    return list(col.to_pylist())


def milvus_uri(cfg: Config) -> str:
    """The configured server URI, or the absolute path of the workspace's Milvus Lite directory."""
    return cfg.milvus.uri or str(Workspace(cfg.workspace).milvus_path.resolve())


def make_vector_store(cfg: Config) -> MilvusStore:
    """A vector store of ``cfg`` for the caller to close; it shares the process's client for its URI."""
    return MilvusStore(milvus_uri(cfg), cfg.milvus)


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
