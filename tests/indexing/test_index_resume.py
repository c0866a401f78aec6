"""A build killed at the ``milvus:N`` crash point and resumed equals a build that was never interrupted."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import JOURNAL, KILL_ENV
from indexing.config import Config
from tests.indexing.digest import DIGEST_CODE, build_code, run_with_config

_BUILD = build_code(batch_rows=50)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [0, 3, 6])
def test_killed_at_milvus_chunk_and_resumed_equals_an_uninterrupted_build(
    chunk: int, workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    crashed, clean = workspace_config("milvus-crash").workspace, workspace_config("milvus-clean").workspace
    for ws in (crashed, clean):
        write_synthetic_corpus(Config(workspace=ws), "ecommerce", 330, chunk=100)  # 7 chunks of 50

    killed = run_with_config(crashed, _BUILD, env={KILL_ENV: f"milvus:{chunk}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = json.loads((crashed / "indexes" / "ecommerce" / "v0001" / JOURNAL).read_text())
    # Chunk N reached ClickHouse and Milvus but was never committed.
    assert (journal["chunks"], journal["rows"], journal["state"]) == (chunk, 50 * chunk, "building")
    assert not (crashed / "indexes" / "ecommerce" / "CURRENT").exists()

    resumed = run_with_config(crashed, _BUILD)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == f"ecommerce: published v0001 with 330 docs (resumed at chunk {chunk})"
    uninterrupted = run_with_config(clean, _BUILD)
    assert uninterrupted.stdout.strip() == "ecommerce: published v0001 with 330 docs (built)", (
        uninterrupted.stderr
    )

    digests = [run_with_config(ws, DIGEST_CODE) for ws in (crashed, clean)]
    for done in digests:
        assert done.returncode == 0, done.stderr
    after_crash, reference = (json.loads(d.stdout) for d in digests)
    assert len(reference["rows"]) == reference["milvus"] == 330
    assert after_crash == reference
