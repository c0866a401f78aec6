"""Milvus through pymilvus' MilvusClient: a Milvus Lite directory in the workspace, or a server URI.

**Layout.** One collection per (corpus version, vector field): ``<table>__vNNNN__<field>``, e.g.
``products__v0002__title``. Milvus 2.3 allows one vector field per collection; Milvus Lite, 2.3 and
2.5/2.6 clusters all take this layout, and a search touches only the field it asks for. The callers
name the version's collection (``products__v0002``) and a schema field; the store maps them to the
field's collection (:func:`field_collection`). Each field's collection holds:

* ``id``: VARCHAR primary key, so a re-sent row replaces the old one (upserts are idempotent);
* ``<field>_vec``: the FLOAT_VECTOR of that text or image field;
* every structured field, mirrored as a scalar so filters can be pushed into vector search:
  strings as VARCHAR, ints as INT64, floats as DOUBLE, bools as BOOL, and **dates and datetimes
  as INT64 Unix epoch seconds (UTC; a date is its midnight)**, e.g. ``release_date >= 1704067200``.

Text fields are not mirrored: ClickHouse holds them. Searches ask for ``output_fields=["id"]`` only.

**Deployments.**

* *Milvus Lite* (the default: ``milvus.uri`` unset, a ``milvus.db`` directory in the workspace) runs
  in-process with no setup. It is a Python engine: each search loops over every row in Python
  (about 1 ms at 3k rows, 40 ms at 100k, 430 ms at 1M), and it ignores search parameters.
* *A local Milvus server* (``prore stores up``, see :mod:`indexing.stores.server`) is the real C++
  standalone server: about 4 ms per HNSW search at 100k rows. Switch to it from about 100k documents,
  or to measure search parameters (``ef``, ``nprobe``), and point the engine at it with
  ``--milvus-uri http://127.0.0.1:PORT``.
* *A cluster* (``milvus.uri: http://milvus:19530``) takes the same layout.

``milvus-lite server --data-dir DIR --port P`` also serves Milvus Lite's engine over gRPC.

**Writing.** :meth:`MilvusStore.create_collection`, :meth:`~MilvusStore.write` and :meth:`~MilvusStore.flush`
follow a :class:`~indexing.stores.milvus_plan.LoadPlan`: by default a server's collection is indexed and
loaded at once, so what is written is searchable; the index build's plan inserts into an unindexed,
unloaded collection with automatic compaction held off, and ``flush`` then indexes each row once (see
:mod:`indexing.stores.milvus_plan`). The store never calls ``compact()``: pymilvus 3 names the collection
only, which a 2.3 server does not read, and it then compacts every collection it holds.

**A server that goes away.** Every request to a server carries ``milvus.timeout_s``; a server that
does not answer in time, or cannot be reached, is a :class:`~indexing.errors.StoreUnavailable`
(retryable), never a hang. The next request connects again, and collections the restarted server
has not loaded yet are loaded again, so the store works once the server is back. The clients, one per URI and
shared by the stores on it, and the typed errors are :mod:`indexing.stores.milvus_connection`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import ConfigError, require
from indexing.config import Config, MilvusConfig
from indexing.errors import StoreError, StoreUnavailable
from indexing.schema import CorpusSchema, DType
from indexing.stores.base import METRICS, Hit, Vectors
from indexing.stores.milvus_connection import (  # close_all, is_lite, open_connections: re-exported
    Connection,
    acquire,
    milvus_error,
    release,
)
from indexing.stores.milvus_connection import close_all as close_all
from indexing.stores.milvus_connection import is_lite as is_lite
from indexing.stores.milvus_connection import open_connections as open_connections
from indexing.stores.milvus_connection import release_vector_stores as release_vector_stores
from indexing.stores.milvus_plan import AUTO_COMPACTION, INTERACTIVE, FlushTimes, LoadPlan
from indexing.workspace import Workspace

# Milvus Lite 3 builds these itself; the faiss-backed ones need faiss-cpu (checked at run time).
LITE_INDEX_TYPES = ("FLAT", "AUTOINDEX")
LITE_FAISS_INDEX_TYPES = ("HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8")
SERVER_INDEX_TYPES = (
    "FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "IVF_RABITQ", "HNSW", "HNSW_SQ", "HNSW_PQ", "HNSW_PRQ",
    "DISKANN", "SCANN", "AUTOINDEX", "GPU_CAGRA", "GPU_IVF_FLAT", "GPU_IVF_PQ", "GPU_BRUTE_FORCE",
)  # fmt: skip
VARCHAR_MAX = 4096
MILVUS_LAYOUT = "collection_per_field"
"""The layout of a version's vectors, recorded in its build settings (earlier builds: one collection)."""
FIELD_SEP = "__"
"""Between a version's collection name and a field name in a field's collection name."""


def vector_field(field: str) -> str:
    """Name of the Milvus vector field of schema field ``field``."""
    return f"{field}_vec"


def field_collection(collection: str, field: str) -> str:
    """The Milvus collection that holds schema field ``field`` of a version's ``collection``.

    >>> field_collection("products__v0002", "title")
    'products__v0002__title'
    """
    return f"{collection}{FIELD_SEP}{field}"


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


HNSW_DEFAULTS = {"M": 16, "efConstruction": 128}
"""HNSW build parameters where ``milvus.index_params`` leaves them out: the Milvus 2.3 server refuses an HNSW
index without them (``efConstruction out of range``); these are ``bench/scale.py``'s measured values."""


def index_params(cfg: MilvusConfig) -> dict[str, Any]:
    """The build ``params`` of the store's index: ``index_params``, over :data:`HNSW_DEFAULTS` for HNSW types.

    >>> index_params(MilvusConfig(index_type="HNSW", index_params={"M": 8}))
    {'M': 8, 'efConstruction': 128}
    >>> index_params(MilvusConfig(index_type="IVF_FLAT", index_params={"nlist": 128}))
    {'nlist': 128}
    """
    base = HNSW_DEFAULTS if cfg.index_type.upper().startswith("HNSW") else {}
    return {**base, **cfg.index_params}


def search_params(cfg: MilvusConfig, k: int) -> dict[str, Any]:
    """The ``params`` of one search of ``k`` hits: ``search_params``, plus ``ef`` for HNSW indexes and
    ``nprobe`` for IVF indexes when configured.

    HNSW needs ``ef >= k`` (Milvus 2.4+ rejects a smaller one), so ``ef`` is raised to ``k``.

    >>> search_params(MilvusConfig(index_type="HNSW", ef=64), 100)
    {'ef': 100}
    >>> search_params(MilvusConfig(index_type="IVF_FLAT", nprobe=16, ef=64), 10)
    {'nprobe': 16}
    """
    params = dict(cfg.search_params)
    kind = cfg.index_type.upper()
    if kind.startswith("HNSW"):
        if cfg.ef is not None:
            params["ef"] = cfg.ef
        if "ef" in params:
            params["ef"] = max(int(params["ef"]), k)
    elif kind.startswith("IVF") and cfg.nprobe is not None:
        params["nprobe"] = cfg.nprobe
    return params


class MilvusStore:
    """The collections of corpus versions, one per (version, vector field); see the module docstring.

    Methods take a version's collection name and, where it matters, a schema field. Every store on
    one URI shares the process's one client for it (reference-counted): the client is opened with
    the first store (with that store's ``timeout_s``) and closed, with Milvus Lite's in-process
    server, when the last store is closed. Close each store when done with it (``close()`` or a
    ``with`` block).
    """

    def __init__(self, uri: str, cfg: MilvusConfig | None = None) -> None:
        self.cfg = cfg or MilvusConfig()
        self.uri = uri
        self.lite = is_lite(uri)
        pymilvus: Any = require("pymilvus", "milvus")
        self._pm = pymilvus
        # Failures are re-raised as typed errors; pymilvus would also log each with a traceback.
        for name in ("pymilvus.decorators", "pymilvus.client.connection_manager"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        if self.lite:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
        self._timeout = None if self.lite else self.cfg.timeout_s
        self._conn: Connection | None = acquire(uri, self.cfg.timeout_s)

    @property
    def closed(self) -> bool:
        return self._conn is None or self._conn.closed

    @property
    def metric(self) -> str:
        """The metric its collections are indexed and searched by (``milvus.metric_type``)."""
        return self.cfg.metric_type

    def create_collection(
        self, name: str, schema: CorpusSchema, dims: Mapping[str, int], *, plan: LoadPlan = INTERACTIVE
    ) -> None:
        """Create the collection of every vector field of ``schema`` that does not exist yet.

        ``dims`` maps each vector field to its size. On a server, ``plan`` says whether the index is created
        and the collections loaded now or by :meth:`flush`, and whether Milvus compacts them on its own.
        """
        check_index_config(self.cfg, lite=self.lite)
        dt = self._pm.DataType
        types = {DType.STRING: dt.VARCHAR, DType.INT: dt.INT64, DType.FLOAT: dt.DOUBLE, DType.BOOL: dt.BOOL}
        existing = set(self.list_collections(name + FIELD_SEP))
        options: dict[str, Any] = {}
        if not self.lite:
            options["shards_num"] = self.cfg.shards_num
            if not plan.auto_compaction:
                options["properties"] = {AUTO_COMPACTION: "false"}
        index_now = self.lite or plan.index_first
        for field in schema.vector_fields:
            physical = field_collection(name, field)
            if physical in existing:
                continue
            sch = self._pm.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
            sch.add_field("id", dt.VARCHAR, is_primary=True, max_length=256)
            for fname in schema.structured_fields:
                if fname == "id":
                    continue
                kind = types.get(schema.field(fname).dtype, dt.INT64)  # dates and datetimes: epoch seconds
                extra = {"max_length": VARCHAR_MAX} if kind == dt.VARCHAR else {}
                sch.add_field(fname, kind, **extra)
            sch.add_field(vector_field(field), dt.FLOAT_VECTOR, dim=int(dims[field]))
            self._call(
                lambda c, s=sch, p=physical: c.create_collection(
                    p, schema=s, timeout=self._timeout, **options
                )
            )
            if index_now:
                self._create_index(physical, field)
        if self.lite or plan.load_first:
            self._ensure_loaded(*(field_collection(name, f) for f in schema.vector_fields))

    def write(
        self,
        name: str,
        schema: CorpusSchema,
        data: pa.Table,
        vectors: Mapping[str, Vectors],
        *,
        fresh: bool = False,
        plan: LoadPlan = INTERACTIVE,
    ) -> None:
        """Write the rows of ``data`` (structured columns) with their ``vectors`` by field.

        Rows are upserted, replacing any with the same id, unless they are ``fresh`` (none of these ids is in
        the collection yet) and ``plan`` inserts; Milvus Lite always upserts.
        """
        method = "insert" if fresh and plan.insert and not self.lite else "upsert"
        columns = {f: _milvus_values(data.column(f), schema.field(f).dtype) for f in schema.structured_fields}
        n, step = data.num_rows, plan.rows_per_request
        for f in schema.vector_fields:
            if vectors[f].shape[0] != n:
                raise StoreError(f"{vectors[f].shape[0]} vectors for {n} rows on field {f}")
        for start in range(0, n, step):
            scalars = [
                {f: vals[i] for f, vals in columns.items()} for i in range(start, min(start + step, n))
            ]
            for f in schema.vector_fields:
                vec, block = vector_field(f), vectors[f]
                rows = [{**row, vec: block[start + j]} for j, row in enumerate(scalars)]
                physical = field_collection(name, f)
                self._call(lambda c, p=physical, r=rows: getattr(c, method)(p, r, timeout=self._timeout))

    def upsert(self, name: str, schema: CorpusSchema, data: pa.Table, vectors: Mapping[str, Vectors]) -> None:
        """Insert or replace the rows of ``data`` (structured columns) with their ``vectors`` by field."""
        self.write(name, schema, data, vectors)

    def search(
        self,
        collection: str,
        field: str,
        vectors: Vectors,
        k: int,
        *,
        filter: str | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` ids per row of ``vectors`` on schema field ``field``, all rows in one request.

        The search parameters are :func:`search_params` of the store's config.
        """
        if len(vectors) == 0:
            return []
        return self._search(collection, field, vectors, k, filter, {})

    def search_band(
        self,
        collection: str,
        field: str,
        vector: Vectors,
        low: float,
        high: float,
        k: int,
        *,
        filter: str | None = None,
    ) -> list[Hit]:
        """At most ``k`` hits of one ``vector`` on ``field`` whose score lies in ``(low, high]``: a Milvus
        range search (``radius`` and ``range_filter``), which both Milvus Lite and the server run.

        Which ``k`` of a larger band come back is the store's choice; the engine asks again with an ``id``
        bound to find the smallest ids of a band (:mod:`serving.engine.ties`).
        """
        # Milvus reads a band as (radius, range_filter] for similarities and [range_filter, radius) for L2
        # distances, whose sign is the score's opposite.
        band = {"radius": -low, "range_filter": -high} if self.cfg.metric_type == "L2" else {
            "radius": low, "range_filter": high}  # fmt: skip
        return self._search(collection, field, [vector], k, filter, band)[0]

    def _search(
        self, collection: str, field: str, vectors: Vectors | Sequence[Vectors], k: int, filter: str | None,
        extra: Mapping[str, Any],
    ) -> list[list[Hit]]:  # fmt: skip
        physical = field_collection(collection, field)
        params = {"metric_type": self.cfg.metric_type, "params": {**search_params(self.cfg, k), **extra}}
        data = [np.asarray(v, dtype=np.float32) for v in vectors]
        res = self._loaded_call(
            physical,
            lambda c: c.search(
                physical,
                data=data,
                anns_field=vector_field(field),
                limit=k,
                filter=filter or "",
                # Milvus Lite returns every field, vectors included, for an empty list.
                output_fields=["id"],
                search_params=params,
                # Sees this process's own writes; no wait for anyone else's (Strong costs a time tick).
                consistency_level="Session",
                timeout=self._timeout,
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
        physical = field_collection(collection, field)
        name = vector_field(field)
        rows = self._loaded_call(
            physical,
            lambda c: c.get(
                physical,
                ids=list(ids),
                output_fields=[name],
                consistency_level="Session",
                timeout=self._timeout,
            ),
        )
        return {str(r["id"]): np.asarray(r[name], dtype=np.float32) for r in rows}

    def count(self, collection: str) -> int:
        """Entities of ``collection`` present in every field's collection (strongly consistent); 0 if none."""
        counts = self.field_counts(collection)
        return min(counts.values()) if counts else 0

    def field_counts(self, collection: str) -> dict[str, int]:
        """Entities per field of ``collection`` (strongly consistent: counts what was written)."""
        counts: dict[str, int] = {}
        for field in self.collection_fields(collection):
            physical = field_collection(collection, field)
            rows = self._loaded_call(
                physical,
                lambda c, p=physical: c.query(
                    p,
                    filter="",
                    output_fields=["count(*)"],
                    consistency_level="Strong",
                    timeout=self._timeout,
                ),
            )
            counts[field] = int(rows[0]["count(*)"]) if rows else 0
        return counts

    def collection_fields(self, collection: str) -> list[str]:
        """The schema fields ``collection`` has a collection for, sorted."""
        prefix = collection + FIELD_SEP
        return sorted(
            n[len(prefix) :] for n in self.list_collections(prefix) if FIELD_SEP not in n[len(prefix) :]
        )

    def has_collection(self, name: str) -> bool:
        """Whether ``name`` has the collection of at least one field."""
        return bool(self.collection_fields(name))

    def list_collections(self, prefix: str = "") -> list[str]:
        """Names of the Milvus collections (one per version and field) that start with ``prefix``."""
        names = self._call(lambda c: c.list_collections(timeout=self._timeout))
        return sorted(str(n) for n in names if str(n).startswith(prefix))

    def drop_collection(self, name: str) -> None:
        """Drop the collection of every field of ``name`` (and a single collection of that name, the
        layout of earlier builds)."""
        conn = self._open()
        prefix = name + FIELD_SEP
        doomed = [
            n
            for n in self.list_collections(name)
            if n == name or (n.startswith(prefix) and FIELD_SEP not in n[len(prefix) :])
        ]
        for physical in doomed:
            with conn.lock:
                conn.loaded.discard(physical)
            self._call(lambda c, p=physical: c.drop_collection(p, timeout=self._timeout))

    def flush(self, name: str, *, wait_indexed_s: float = 3600.0) -> FlushTimes:
        """Persist buffered writes of every field's collection; on a server, also make them searchable
        through their index: create the index of a collection created without one (:class:`LoadPlan`),
        wait (up to ``wait_indexed_s``) until it covers every row, and load what is not loaded yet.

        Returns the seconds of each step.
        """
        fields = self.collection_fields(name)
        t0 = time.perf_counter()
        for field in fields:
            physical = field_collection(name, field)
            self._call(
                lambda c, p=physical: c.flush(p, timeout=None if self.lite else max(self.cfg.timeout_s, 60.0))
            )
        persist_s = time.perf_counter() - t0
        if self.lite:
            return FlushTimes(persist_s=persist_s)
        t0 = time.perf_counter()
        deadline = time.monotonic() + wait_indexed_s
        for field in fields:
            physical = field_collection(name, field)
            if not self._call(lambda c, p=physical: c.list_indexes(p, timeout=self._timeout)):
                self._create_index(physical, field)
        for field in fields:
            physical = field_collection(name, field)
            while not self._indexed(physical, vector_field(field)):
                if time.monotonic() > deadline:
                    raise StoreUnavailable(
                        f"Milvus did not finish indexing {physical} within {wait_indexed_s:.0f} s"
                    )
                time.sleep(0.5)
        index_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        # Loading a whole collection at once can take longer than one request may.
        wait = max(self.cfg.timeout_s, 60.0, deadline - time.monotonic())
        self._ensure_loaded(*(field_collection(name, f) for f in fields), wait_s=wait)
        return FlushTimes(persist_s, index_s, time.perf_counter() - t0)

    def release(self, name: str) -> None:
        """Release every field's collection of ``name`` from the server's memory; the next search loads it again."""
        conn = self._open()
        for field in self.collection_fields(name):
            physical = field_collection(name, field)
            with conn.lock:
                conn.loaded.discard(physical)
            self._call(lambda c, p=physical: c.release_collection(p, timeout=self._timeout))

    def close(self) -> None:
        """Release this store's share of the client; the last store on a URI closes it. Twice is harmless."""
        conn, self._conn = self._conn, None
        if conn is not None:
            release(conn)

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create_index(self, physical: str, field: str) -> None:
        params = self._call(lambda c: c.prepare_index_params())
        params.add_index(
            field_name=vector_field(field),
            index_type=self.cfg.index_type,
            metric_type=self.cfg.metric_type,
            params=index_params(self.cfg),
        )
        # pymilvus polls every index with a 0.5 s sleep; an empty collection has nothing to wait for
        # (2 s per collection saved), and flush() waits for a full one.
        self._call(lambda c: c.create_index(physical, params, sync=False, timeout=self._timeout))

    def _indexed(self, physical: str, index_name: str) -> bool:
        info = self._call(lambda c: c.describe_index(physical, index_name, timeout=self._timeout)) or {}
        if str(info.get("state", "")) == "Failed":
            raise StoreError(f"Milvus failed to index {physical}: {info.get('index_state_fail_reason', '')}")
        total, indexed = int(info.get("total_rows", 0) or 0), int(info.get("indexed_rows", 0) or 0)
        return int(info.get("pending_index_rows", 0) or 0) == 0 and indexed >= total

    def _open(self) -> Connection:
        if self._conn is None or self._conn.closed:
            raise StoreError(f"this Milvus store ({self.uri}) is closed", code="store_closed")
        return self._conn

    def _ensure_loaded(self, *names: str, wait_s: float | None = None) -> None:
        """Load the collections ``names`` not loaded yet, all at once (a server takes seconds for each)."""
        conn = self._open()
        with conn.lock:
            todo = [n for n in names if n not in conn.loaded]
        if not todo:
            return
        # One load at a time per connection: a thread that finds a collection missing while another loads it
        # waits for that load (a search of a collection mid-load fails: "in state 'loading'").
        with conn.load_lock:
            with conn.lock:
                todo = [n for n in names if n not in conn.loaded]
            if not todo:
                return
            # Loading waits for the server; a restarted server may take longer than one request.
            wait = None if self.lite else (wait_s or max(self.cfg.timeout_s, 60.0))
            if len(todo) > 1 and not self.lite:  # Milvus Lite loads at once
                for name in todo:
                    self._call(lambda c, n=name: c.load_collection(n, timeout=wait, _async=True))
            for name in todo:
                self._call(lambda c, n=name: c.load_collection(n, timeout=wait))
            with conn.lock:
                conn.loaded.update(todo)

    def _loaded_call(self, name: str, fn: Any, code: str = "milvus") -> Any:
        """``fn(client)`` on loaded collection ``name``; loaded again once if the server lost it (restarted)."""
        self._ensure_loaded(name)
        try:
            return self._call(fn, code)
        except StoreUnavailable:
            raise
        except StoreError as err:
            if "not loaded" not in err.message:
                raise
        conn = self._open()
        with conn.lock:
            conn.loaded.discard(name)
        self._ensure_loaded(name)
        return self._call(fn, code)

    def _call(self, fn: Any, code: str = "milvus") -> Any:
        conn = self._open()
        client = conn.current()
        try:
            return fn(client)
        except Exception as exc:
            err = milvus_error(exc, f"Milvus at {self.uri}" if not self.lite else "Milvus", code)
            if isinstance(err, StoreUnavailable):
                conn.mark_stale()
            raise err from None


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
