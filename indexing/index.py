"""The handle the engine uses to reach one published index version of a corpus.

>>> from indexing.config import Config
>>> open_index(Config(workspace=Path("no-such-workspace")), "ecommerce")
Traceback (most recent call last):
...
indexing.errors.StoreError: no published ecommerce index in no-such-workspace; run: prore index build ecommerce

Versions live under ``indexes/<domain>/``: ``CURRENT`` names the published one (switched by an
atomic write), and ``vNNNN/version.json`` exists only once that version is complete. A reader
therefore never sees a half-built index. Clients, models and BM25 indexes are cached per process,
so opening an index again costs two small file reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from indexing.config import Config, EmbedderConfig
from indexing.embedders.base import Embedder
from indexing.embedders.registry import shared_embedder, with_identity
from indexing.errors import CorpusError, StoreError
from indexing.schema import CorpusSchema, Role, schema_for
from indexing.stores.base import Hit, SqlStore, VectorStore
from indexing.workspace import Workspace

CURRENT = "CURRENT"
VERSION_FILE = "version.json"
VERSION_RE = re.compile(r"^v(\d{4})$")
BM25_DIR = "bm25"


def version_name(number: int) -> str:
    """``3`` -> ``v0003``."""
    return f"v{number:04d}"


def physical_table(cfg: Config, schema: CorpusSchema, version: str) -> str:
    """Qualified ClickHouse table of a version, e.g. ``prore.products__v0002``."""
    return f"{cfg.clickhouse.database}.{schema.table}__{version}"


def collection_name(schema: CorpusSchema, version: str) -> str:
    """Milvus collection of a version, e.g. ``products__v0002``."""
    return f"{schema.table}__{version}"


def read_current(ws: Workspace, domain: str) -> str | None:
    """The published version of ``domain``, or ``None`` if none was ever published."""
    path = ws.index_root(domain) / CURRENT
    if not path.is_file():
        return None
    name = path.read_text().strip()
    return name if VERSION_RE.match(name) else None


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
    """A handle on the CURRENT version of ``domain`` (or on ``version``, which must be complete)."""
    schema = schema_for(domain)
    ws = Workspace(cfg.workspace)
    name = version or read_current(ws, domain)
    if name is None:
        raise StoreError(
            f"no published {domain} index in {ws.root}; run: prore index build {domain}", code="no_index"
        )
    meta = read_version(ws, domain, name)
    if meta is None:
        raise StoreError(
            f"{domain} index version {name!r} is not a complete version in {ws.root}; "
            f"run: prore index info {domain}",
            code="no_index",
        )
    return IndexHandle(cfg, schema, name, meta)


class IndexHandle:
    """One published version: its SQL table, Milvus collection, BM25 indexes and embedders."""

    def __init__(self, cfg: Config, schema: CorpusSchema, version: str, meta: dict[str, Any]) -> None:
        from indexing.stores.clickhouse import make_sql_store
        from indexing.stores.milvus import make_vector_store

        self.cfg = cfg
        self.schema = schema
        self.version = version
        self.meta = meta
        self.rows = int(meta.get("rows", 0))
        self.table = physical_table(cfg, schema, version)
        self.collection = collection_name(schema, version)
        self.sql: SqlStore = make_sql_store(cfg)
        self.vectors: VectorStore = make_vector_store(cfg)
        self._ws = Workspace(cfg.workspace)
        self._embedder_cfg = embedder_config_of(cfg.embedder, meta)

    def embedder(self, field: str) -> Embedder:
        """The cached embedder that built ``field``'s vectors (shared by every field of its role)."""
        return shared_embedder(self._embedder_cfg, self._vector_role(field))

    def dense_search(
        self, field: str, queries: Sequence[str], k: int, *, filter: str | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` ids per query on ``field``: one batched embedding, one Milvus search request."""
        self._vector_role(field)
        if not queries:
            return []
        vectors = self.embedder(field).embed(list(queries))
        return self.vectors.search(self.collection, field, vectors, k, filter=filter)

    def sparse_search(self, field: str, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` ids per query by BM25 on ``field``."""
        from indexing.stores.bm25 import load_cached

        self._vector_role(field)
        if not queries:
            return []
        return load_cached(bm25_dir(self._ws, self.schema.domain, self.version, field)).search(queries, k)

    def fetch_docs(self, ids: Sequence[str], fields: Sequence[str]) -> list[dict[str, Any]]:
        """``fields`` of each known id, in the order of ``ids``, fetched with one SQL query."""
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
        """Release what this handle holds; shared clients and models stay for the next handle."""
        self.meta = {}

    def __enter__(self) -> IndexHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"IndexHandle({self.schema.domain!r}, {self.version!r}, rows={self.rows})"

    def _vector_role(self, field: str) -> Role:
        role = self.schema.field(field).role
        if role is Role.STRUCTURED:
            raise CorpusError(
                f"{self.schema.table}.{field} is not a text or image field; vector fields: "
                f"{', '.join(self.schema.vector_fields)}",
                code="not_vector_field",
            )
        return role


def embedder_config_of(current: EmbedderConfig, meta: dict[str, Any]) -> EmbedderConfig:
    """The embedder settings a version was built with; where to reach them (endpoint) stays current."""
    return with_identity(current, meta.get("embedder_config") or {})
