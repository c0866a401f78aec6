"""Everything a reader can get from a published index, as one comparable value.

Two builds that should publish the same index (resumed after a crash and uninterrupted, one engine and
the other) are compared through :func:`index_digest`; the times of the build (when it ran) are left out.
"""

from __future__ import annotations

import json
from typing import Any

from indexing.config import Config
from indexing.index import open_index


def index_digest(cfg: Config, domain: str) -> dict[str, Any]:
    """Version, SQL rows, Milvus entities and vectors, dense and sparse hits of five queries, version metadata."""
    with open_index(cfg, domain) as idx:
        ids = [r[0] for r in idx.sql.query(f"SELECT id FROM {idx.table} ORDER BY id")]
        rows = [list(map(str, r)) for r in idx.sql.query(f"SELECT * FROM {idx.table} ORDER BY id")]
        vectors = {
            f: {
                i: [round(float(x), 6) for x in v]
                for i, v in sorted(idx.vectors.fetch_vectors(idx.collection, f, ids).items())
            }
            for f in idx.schema.vector_fields
        }
        text = idx.schema.vector_fields[0]
        queries = [r[1] for r in idx.sql.query(f"SELECT id, {text} FROM {idx.table} ORDER BY id LIMIT 5")]
        dense = {f: idx.dense_search(f, queries, 5) for f in idx.schema.vector_fields}
        sparse = {f: idx.sparse_search(f, queries, 5) for f in idx.schema.vector_fields}
        meta = {k: v for k, v in idx.meta.items() if k not in ("published_at", "reference_time")}
        digest = {"version": idx.version, "ids": ids, "rows": rows, "milvus": idx.vectors.count(idx.collection),
                  "vectors": vectors, "dense": dense, "sparse": sparse, "meta": meta}  # fmt: skip
    # Through JSON, as a digest printed by another process reads back (tuples become lists).
    loaded: dict[str, Any] = json.loads(json.dumps(digest, sort_keys=True, default=str))
    return loaded


def print_digest(cfg: Config, domain: str) -> None:
    """Print :func:`index_digest` as JSON (for a build run in a process of its own)."""
    print(json.dumps(index_digest(cfg, domain), sort_keys=True, default=str))
