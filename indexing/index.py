"""The handle the engine uses to reach one published index version of a corpus.

>>> from indexing.config import Config
>>> open_index(Config(workspace=Path("no-such-workspace")), "ecommerce")
Traceback (most recent call last):
...
indexing.errors.StoreError: no published ecommerce index in no-such-workspace; run: prore index build ecommerce

Versions live under ``indexes/<domain>/``: ``CURRENT`` names the published one (switched by an
atomic write), and ``vNNNN/version.json`` exists only once that version is complete. A reader
therefore never sees a half-built index.

**Lifetimes.** A handle holds a lease on its version (:class:`indexing.publish.Lease`), so index
builds keep that version, tables and collection included, until the handle is closed; a service
moves to a newly published version with :meth:`IndexHandle.refresh`. A handle owns one reference
to the SQL store and one to the vector store and releases them in :meth:`IndexHandle.close` (or at
the end of a ``with`` block). What outlives handles is process-wide and bounded or explicit: the
Milvus client per URI (closed with its last store), the chDB session (the process's lifetime),
loaded BM25 indexes (a bounded cache) and embedding models with their caches (one per settings);
:func:`close_all` ends all but the chDB session.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, NoReturn

from indexing.config import Config, EmbedderConfig
from indexing.embedders.base import Embedder
from indexing.embedders.registry import release_shared_embedders, shared_embedder, with_identity
from indexing.errors import CorpusError, StoreError
from indexing.publish import CURRENT, VERSION_RE, Lease, lease_current, version_name
from indexing.publish import read_current as read_current_of
from indexing.schema import CorpusSchema, Role, schema_for
from indexing.stores.base import Hit, SqlStore, VectorStore
from indexing.workspace import Workspace

__all__ = [
    "BM25_DIR",
    "CURRENT",
    "VERSION_FILE",
    "VERSION_RE",
    "IndexHandle",
    "close_all",
    "open_index",
    "version_name",
]

VERSION_FILE = "version.json"
BM25_DIR = "bm25"


def physical_table(cfg: Config, schema: CorpusSchema, version: str) -> str:
    """Qualified ClickHouse table of a version, e.g. ``prore.products__v0002``."""
    return f"{cfg.clickhouse.database}.{schema.table}__{version}"


def collection_name(schema: CorpusSchema, version: str) -> str:
    """Milvus name of a version, e.g. ``products__v0002``; each vector field has its own collection
    under it (``products__v0002__title``, see :func:`indexing.stores.milvus.field_collection`)."""
    return f"{schema.table}__{version}"


def read_current(ws: Workspace, domain: str) -> str | None:
    """The published version of ``domain``, or ``None`` if none was ever published."""
    return read_current_of(ws.index_root(domain))


def read_version(ws: Workspace, domain: str, version: str) -> dict[str, Any] | None:
    """The metadata of a complete version, or ``None`` if it is absent or unfinished."""
    if not VERSION_RE.match(version):
        return None
    path = ws.index_dir(domain, version) / VERSION_FILE
    if not path.is_file():
        return None
    meta: dict[str, Any] = json.loads(path.read_text())
    return meta


def bm25_dir(ws: Workspace, domain: str, version: str, field: str) -> Path:
    """Directory of the BM25 index of ``field`` in a version."""
    return ws.index_dir(domain, version) / BM25_DIR / field


def open_index(cfg: Config, domain: str, version: str | None = None) -> IndexHandle:
    """A handle on the CURRENT version of ``domain`` (or on ``version``, which must be complete).

    The handle leases its version until :meth:`IndexHandle.close`; close it (or use ``with``).
    """
    schema = schema_for(domain)
    ws = Workspace(cfg.workspace)
    if version is None:
        lease = lease_current(ws.index_root(domain), marker=VERSION_FILE)
        if lease is None and read_current(ws, domain) is None:
            raise StoreError(
                f"no published {domain} index in {ws.root}; run: prore index build {domain}", code="no_index"
            )
    else:
        lease = (
            Lease.acquire(ws.index_dir(domain, version), marker=VERSION_FILE)
            if VERSION_RE.match(version)
            else None
        )
    meta = read_version(ws, domain, lease.directory.name) if lease is not None else None
    if lease is None or meta is None:
        if lease is not None:
            lease.release()
        raise StoreError(
            f"{domain} index version {version or read_current(ws, domain)!r} is not a complete version in "
            f"{ws.root}; run: prore index info {domain}",
            code="no_index",
        )
    try:
        return IndexHandle(cfg, schema, lease.directory.name, meta, lease=lease)
    except BaseException:
        lease.release()
        raise


REFERENCE_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def reference_time_text(now: datetime.datetime | None = None) -> str:
    """The ``reference_time`` a build writes into ``version.json``: ``now`` (default: the clock), UTC, to the second."""
    moment = now or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime(REFERENCE_TIME_FORMAT)


def reference_time_of(meta: dict[str, Any]) -> datetime.datetime:
    """A version's reference time (aware, UTC); versions written before it existed use their ``published_at``."""
    text = meta.get("reference_time") or meta.get("published_at")
    if not isinstance(text, str):
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return datetime.datetime.strptime(text, REFERENCE_TIME_FORMAT).replace(tzinfo=datetime.UTC)


class IndexHandle:
    """One published version: its SQL table, Milvus collections (one per vector field), BM25 indexes
    and embedders.

    Safe to share between threads. See the module docstring for what it holds and releases.
    """

    def __init__(
        self,
        cfg: Config,
        schema: CorpusSchema,
        version: str,
        meta: dict[str, Any],
        *,
        lease: Lease | None = None,
    ) -> None:
        from indexing.stores.clickhouse import make_sql_store
        from indexing.stores.milvus import make_vector_store

        self.cfg = cfg
        self.schema = schema
        self.version = version
        self.meta = meta
        self.rows = int(meta.get("rows", 0))
        self.reference_time = reference_time_of(meta)
        """The version's "now" (UTC, written at build time): what ``now()`` / ``today()`` mean to its programs."""
        _check_layout(schema, version, meta)
        self.table = physical_table(cfg, schema, version)
        self.collection = collection_name(schema, version)
        self._ws = Workspace(cfg.workspace)
        self._embedder_cfg = embedder_config_of(cfg.embedder, meta)
        self._bm25: dict[str, Any] = {}
        self._lease = lease
        self._closed = False
        self.sql: SqlStore = make_sql_store(cfg)
        try:
            self.vectors: VectorStore = make_vector_store(cfg)
        except BaseException:
            self.sql.close()
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def is_current(self) -> bool:
        """Whether this handle's version is the one CURRENT names now."""
        return read_current(self._ws, self.schema.domain) == self.version

    def refresh(self) -> IndexHandle:
        """A handle on the version CURRENT names now: this handle when it is that version, else a new one.

        A long-lived service calls this between requests, swaps to the returned handle and closes
        the old one once no request uses it; the old version stays readable until then.
        """
        self._check_open()
        if self.is_current():
            return self
        return open_index(self.cfg, self.schema.domain)

    def embedder(self, field: str) -> Embedder:
        """The cached embedder that built ``field``'s vectors (shared by every field of its role)."""
        self._check_open()
        return shared_embedder(self._embedder_cfg, self._vector_role(field))

    def dense_search(
        self, field: str, queries: Sequence[str], k: int, *, filter: str | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` ids per query on ``field``: one batched embedding, one Milvus search request."""
        self._check_open()
        self._vector_role(field)
        if not queries:
            return []
        vectors = self.embedder(field).embed(list(queries))
        return self.vectors.search(self.collection, field, vectors, k, filter=filter)

    def sparse_search(
        self, field: str, queries: Sequence[str], k: int, *, within: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` ids per query by BM25 on ``field`` (among the documents ``within``, when given)."""
        from indexing.stores.bm25 import load_cached

        self._check_open()
        self._vector_role(field)
        if not queries:
            return []
        index = self._bm25.get(field)
        if index is None:
            index = self._bm25[field] = load_cached(
                bm25_dir(self._ws, self.schema.domain, self.version, field)
            )
        result: list[list[Hit]] = index.search(queries, k, within=within)
        return result

    def fetch_docs(self, ids: Sequence[str], fields: Sequence[str]) -> list[dict[str, Any]]:
        """``fields`` of each known id, in the order of ``ids``, fetched with one SQL query."""
        self._check_open()
        columns = ["id", *[f for f in dict.fromkeys(fields) if f != "id"]]
        for f in columns:
            self.schema.field(f)
        if not ids:
            return []
        select = ", ".join(f"`{c}`" for c in columns)
        rows = self.sql.query(
            f"SELECT {select} FROM {self.table} WHERE id IN {{ids:Array(String)}}",
            params={"ids": list(dict.fromkeys(ids))},
        )
        by_id = {row[0]: dict(zip(columns, row, strict=True)) for row in rows}
        return [dict(by_id[i]) for i in ids if i in by_id]

    def close(self) -> None:
        """Release what this handle holds: its version's lease and its store references. Twice is harmless.

        Afterwards the next index build may drop this version; using the handle raises ``closed``.
        """
        if self._closed:
            return
        self._closed = True
        self._bm25.clear()
        try:
            self.sql.close()
        finally:
            try:
                self.vectors.close()
            finally:
                if self._lease is not None:
                    self._lease.release()

    def __enter__(self) -> IndexHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"IndexHandle({self.schema.domain!r}, {self.version!r}, rows={self.rows}{state})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(
                f"the {self.schema.domain} index handle on {self.version} is closed", code="closed"
            )

    def _vector_role(self, field: str) -> Role:
        role = self.schema.field(field).role
        if role is Role.STRUCTURED:
            raise CorpusError(
                f"{self.schema.table}.{field} is not a text or image field; vector fields: "
                f"{', '.join(self.schema.vector_fields)}",
                code="not_vector_field",
            )
        return role


def _check_layout(schema: CorpusSchema, version: str, meta: dict[str, Any]) -> None:
    """Refuse a version whose vectors are in the layout of earlier builds (one Milvus collection)."""
    from indexing.stores.milvus import MILVUS_LAYOUT

    milvus = (meta.get("settings") or {}).get("milvus") or {}
    if "settings" in meta and milvus.get("layout") != MILVUS_LAYOUT:
        raise StoreError(
            f"{schema.domain} index {version} keeps its vectors in one Milvus collection, the layout of "
            f"earlier builds; run: prore index build {schema.domain}",
            code="index_outdated",
        )


def embedder_config_of(current: EmbedderConfig, meta: dict[str, Any]) -> EmbedderConfig:
    """The embedder settings a version was built with; where to reach them (endpoint) stays current."""
    return with_identity(current, meta.get("embedder_config") or {})


def close_all() -> None:
    """Close what this process keeps open across handles: Milvus clients, loaded BM25 indexes, embedders.

    For process shutdown and tests; handles still open fail afterwards. The chDB session stays: chDB
    binds one path per process for the process's lifetime.
    """
    from indexing.stores import bm25, milvus

    milvus.close_all()
    bm25.forget_all()
    release_shared_embedders()


def exit_process(code: int) -> NoReturn:
    """End the process with ``code`` after closing what it holds open and flushing its output.

    chDB 4.4 sometimes aborts or segfaults in its own static destructors when the interpreter shuts down
    (``Exception in global_context->shutdown(): The ShutdownTablesThreadPool is not initialized``, then exit
    status 134 or 139), after every byte of the program's work was written. Commands, jobs and test
    processes end here instead, so their exit status is the one they chose; the chDB files are already
    consistent at that point (every statement has returned).
    """
    with contextlib.suppress(Exception):
        close_all()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
