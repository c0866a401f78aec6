"""The index build on a Milvus standalone server (:data:`~indexing.stores.milvus_plan.BULK_LOAD`): every row
inserted once and indexed once, after the load, with the configured HNSW parameters; automatic compaction
held off; a build killed in the middle of the load and resumed equals one that was never interrupted.

The server here has small segments (``dataCoord.segment.maxSize`` 4 MB: sealed at about 3,000 rows of these
collections), so a build of a few thousand rows spans several segments, as a large corpus does."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("milvus", reason="needs the milvus-server extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import JOURNAL, KILL_ENV, build_index
from indexing.config import Config, MilvusConfig
from indexing.index import open_index
from indexing.schema import PRODUCTS
from indexing.stores import server
from indexing.stores.milvus import field_collection, vector_field
from indexing.stores.milvus_plan import AUTO_COMPACTION
from tests.indexing.digest import DIGEST_CODE, build_code, run_with_config

# A server of its own: under pytest-xdist, on the worker of the session's standalone server (tests/conftest.py).
pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.xdist_group("milvus-standalone")]

HNSW: dict[str, Any] = {
    "index_type": "HNSW",
    "metric_type": "IP",
    "index_params": {"M": 8, "efConstruction": 64},
    "ef": 16,
}


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Milvus standalone server with 4 MB segments: its URI and its log."""
    root = tmp_path_factory.mktemp("milvus-small-segments")
    info = server.start(root, port=server.free_port(), settings={"dataCoord.segment.maxSize": 4})
    config = yaml.safe_load((root / "configs" / "milvus.yaml").read_text())
    assert config["dataCoord"]["segment"]["maxSize"] == 4  # the override
    assert config["dataCoord"]["segment"]["sealProportion"] == server.SEAL_PROPORTION
    try:
        yield info.uri or "", root / server.LOG_FILE
    finally:
        server.stop(root, timeout_s=10)


def _client(uri: str) -> Any:
    from pymilvus import MilvusClient

    return MilvusClient(uri=uri, timeout=60)


def _index_builds(log: Path, collection_id: str) -> int:
    """How often the index node indexed a segment of the collection, from the server's log."""
    lines = log.read_text(errors="replace").splitlines()
    return sum(
        "Successfully build index" in line and f"Collection={collection_id}]" in line for line in lines
    )


def test_a_fresh_server_build_indexes_each_segment_once_with_the_configured_hnsw(
    small_segments: tuple[str, Path],
    workspace_config: Callable[..., Config],
    write_synthetic_corpus: Callable[..., Any],
) -> None:
    uri, log = small_segments
    cfg = workspace_config("bulk", text="hashing", image="hashing", hashing_dim=32)
    cfg = cfg.replace(milvus=MilvusConfig(uri=uri, **HNSW))
    rows = 5000
    write_synthetic_corpus(cfg, "ecommerce", rows)
    result = build_index(cfg, "ecommerce", progress=False)
    assert (result.status, result.rows) == ("built", rows)
    t = result.times
    assert min(t.milvus_write_s, t.milvus_flush_s, t.milvus_index_s, t.milvus_load_s) > 0
    assert t.milvus_write_s + t.milvus_flush_s + t.milvus_index_s + t.milvus_load_s <= t.milvus_s

    client = _client(uri)
    for field in PRODUCTS.vector_fields:
        physical = field_collection(result.collection, field)
        info = client.describe_index(physical, vector_field(field))
        assert (info["index_type"], info["metric_type"], info["M"], info["efConstruction"]) == (
            "HNSW",
            "IP",
            "8",
            "64",
        )
        # The index covers every row, and there was never a delete to apply: each row was written once.
        assert info["indexed_rows"] == info["total_rows"] == rows and info["pending_index_rows"] == 0
        described = client.describe_collection(physical)
        assert described["properties"] == {AUTO_COMPACTION: "false"}
        segments = client.list_persistent_segments(physical)
        assert len(segments) >= 2 and sum(s.num_rows for s in segments) == rows
        # Milvus indexes segments of 1,024 rows and more (indexCoord.segment.minSegmentNumRowsToEnableIndex).
        indexable = sum(s.num_rows >= 1024 for s in segments)
        assert indexable >= 1 and _index_builds(log, str(described["collection_id"])) == indexable
        assert str(client.get_load_state(physical)["state"]) == "Loaded"
    client.close()

    with open_index(cfg, "ecommerce") as idx:
        assert idx.vectors.count(idx.collection) == rows
        title = idx.sql.query(f"SELECT title FROM {idx.table} ORDER BY id LIMIT 1")[0][0]
        hits = idx.dense_search("title", [title], 5)[0]
        assert len(hits) == 5 and hits[0][1] == pytest.approx(1.0, abs=1e-4)  # the title's own vector


_BUILD = build_code(batch_rows=200)


def _python(
    ws: Path, uri: str, code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_with_config(ws, code, hashing_dim=32, milvus_uri=uri, env=env, timeout_s=600)


def _comparable(digest: dict[str, Any]) -> dict[str, Any]:
    """The digest with each dense hit list reduced to its scores: ids of equal score (titles that repeat) come
    in the order the segments happen to hold them, which a resumed build lays out differently. (The index is
    FLAT, exact: an approximate one may also miss differently on the two layouts.)"""
    dense = {f: [[round(s, 5) for _, s in hits] for hits in lists] for f, lists in digest["dense"].items()}
    return {**digest, "dense": dense}


def test_a_server_build_killed_mid_load_and_resumed_equals_an_uninterrupted_one(
    small_segments: tuple[str, Path],
    workspace_config: Callable[..., Config],
    write_synthetic_corpus: Callable[..., Any],
) -> None:
    uri = small_segments[0]
    crashed, clean = workspace_config("bulk-crash").workspace, workspace_config("bulk-clean").workspace
    for ws in (crashed, clean):
        write_synthetic_corpus(Config(workspace=ws), "ecommerce", 1200, chunk=400)  # 6 chunks of 200

    killed = _python(crashed, uri, _BUILD, env={KILL_ENV: "milvus:3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = json.loads((crashed / "indexes" / "ecommerce" / "v0001" / JOURNAL).read_text())
    # Chunk 3 was inserted but never committed: the resumed run upserts it, and inserts the rest.
    assert (journal["chunks"], journal["rows"], journal["state"]) == (3, 600, "building")
    resumed = _python(crashed, uri, _BUILD)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "ecommerce: published v0001 with 1200 docs (resumed at chunk 3)"
    after_crash = _python(crashed, uri, DIGEST_CODE)
    assert after_crash.returncode == 0, after_crash.stderr
    client = _client(uri)
    for field in PRODUCTS.vector_fields:
        info = client.describe_index(field_collection("products__v0001", field), vector_field(field))
        # Chunk 3 went in twice (an insert, then the upsert's delete and insert): every row is indexed.
        assert info["indexed_rows"] == info["total_rows"] == 1400 and info["pending_index_rows"] == 0
    client.close()

    # Both workspaces name their collections alike on this server: the clean build replaces the other's.
    uninterrupted = _python(clean, uri, _BUILD)
    assert uninterrupted.stdout.strip() == "ecommerce: published v0001 with 1200 docs (built)", (
        uninterrupted.stderr
    )
    reference = _python(clean, uri, DIGEST_CODE)
    assert reference.returncode == 0, reference.stderr
    got, want = json.loads(after_crash.stdout), json.loads(reference.stdout)
    assert len(want["rows"]) == want["milvus"] == 1200
    assert _comparable(got) == _comparable(want)
