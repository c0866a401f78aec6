"""A build killed at the ``milvus:N`` crash point and resumed equals a build that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import JOURNAL, KILL_ENV
from indexing.config import Config

ROOT = Path(__file__).resolve().parents[2]

_CONFIG = """
from pathlib import Path
from indexing.config import ClickHouseConfig, Config, EmbedderConfig
ws = Path({ws!r})
cfg = Config(workspace=ws, clickhouse=ClickHouseConfig(chdb_path=str(ws / "chdb")),
             embedder=EmbedderConfig(text="hashing", image="hashing", hashing_dim=64))
"""

_BUILD = """
from indexing.build import build_index
print(build_index(cfg, "ecommerce", batch_rows=50, progress=False).summary())
from indexing.index import exit_process
exit_process(0)
"""

_DIGEST = """
from tests.indexing.digest import print_digest
print_digest(cfg, "ecommerce")
from indexing.index import exit_process
exit_process(0)
"""


def _python(ws: Path, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``cfg`` bound to workspace ``ws``, in its own process (its own chDB path)."""
    script = textwrap.dedent(_CONFIG.format(ws=str(ws))) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("chunk", [0, 3, 6])
def test_killed_at_milvus_chunk_and_resumed_equals_an_uninterrupted_build(
    chunk: int, workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    crashed, clean = workspace_config("milvus-crash").workspace, workspace_config("milvus-clean").workspace
    for ws in (crashed, clean):
        write_synthetic_corpus(Config(workspace=ws), "ecommerce", 330, chunk=100)  # 7 chunks of 50

    killed = _python(crashed, _BUILD, env={KILL_ENV: f"milvus:{chunk}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = json.loads((crashed / "indexes" / "ecommerce" / "v0001" / JOURNAL).read_text())
    # Chunk N reached ClickHouse and Milvus but was never committed.
    assert (journal["chunks"], journal["rows"], journal["state"]) == (chunk, 50 * chunk, "building")
    assert not (crashed / "indexes" / "ecommerce" / "CURRENT").exists()

    resumed = _python(crashed, _BUILD)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == f"ecommerce: published v0001 with 330 docs (resumed at chunk {chunk})"
    uninterrupted = _python(clean, _BUILD)
    assert uninterrupted.stdout.strip() == "ecommerce: published v0001 with 330 docs (built)", uninterrupted.stderr

    digests = [_python(ws, _DIGEST) for ws in (crashed, clean)]
    for done in digests:
        assert done.returncode == 0, done.stderr
    after_crash, reference = (json.loads(d.stdout) for d in digests)
    assert len(reference["rows"]) == reference["milvus"] == 330
    assert after_crash == reference
