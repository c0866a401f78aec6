"""Everything a reader can get from a published index, as one comparable value.

Two builds that should publish the same index (resumed after a crash and uninterrupted, one engine and
the other) are compared through :func:`index_digest`; the times of the build (when it ran) are left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from indexing.config import Config
from indexing.index import open_index

ROOT = Path(__file__).resolve().parents[2]


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


_CONFIG = """
from pathlib import Path
from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
ws = Path({ws!r})
milvus = MilvusConfig(uri={uri!r}, index_type="FLAT") if {uri!r} else MilvusConfig()
cfg = Config(workspace=ws, clickhouse=ClickHouseConfig(chdb_path=str(ws / "chdb")),
             embedder=EmbedderConfig(text="hashing", image="hashing", hashing_dim={dim}), milvus=milvus)
"""


def build_code(batch_rows: int) -> str:
    """Code for :func:`run_with_config`: build the ``ecommerce`` index in chunks of ``batch_rows`` and print its summary."""
    return f"""
from indexing.build import build_index
print(build_index(cfg, "ecommerce", batch_rows={batch_rows}, progress=False).summary())
from indexing.index import exit_process
exit_process(0)
"""


DIGEST_CODE = """
from tests.indexing.digest import print_digest
print_digest(cfg, "ecommerce")
from indexing.index import exit_process
exit_process(0)
"""
"""Code for :func:`run_with_config`: print the ``ecommerce`` index's :func:`index_digest`."""


def run_with_config(
    ws: Path,
    code: str,
    *,
    hashing_dim: int = 64,
    milvus_uri: str = "",
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python process of its own (its own chDB path, a kill that takes only it) with ``cfg``
    bound to workspace ``ws``: the hashing embedder of ``hashing_dim``, Milvus Lite in the workspace or the
    server at ``milvus_uri`` (FLAT, exact)."""
    script = textwrap.dedent(_CONFIG.format(ws=str(ws), uri=milvus_uri, dim=hashing_dim)) + textwrap.dedent(
        code
    )
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
