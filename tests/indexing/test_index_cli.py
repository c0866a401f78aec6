"""``prore index build|info``: crash and resume in a real subprocess, one-line errors, info output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import JOURNAL, KILL_ENV
from indexing.config import Config
from prore.cli import main

ROOT = Path(__file__).resolve().parents[2]


def prore(workspace: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m prore --workspace W ...`` in its own process (so it has its own chDB path)."""
    return subprocess.run(
        [sys.executable, "-m", "prore", "--workspace", str(workspace), *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def info_json(workspace: Path, domain: str) -> dict[str, Any]:
    done = prore(workspace, "index", "info", domain, "--json")
    assert done.returncode == 0, done.stderr
    data: list[dict[str, Any]] = json.loads(done.stdout)
    return data[0]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["clickhouse:3", "verified"])
def test_killed_build_resumes_to_exact_counts(
    kill_at: str, workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    ws = workspace_config("crash").workspace
    write_synthetic_corpus(Config(workspace=ws), "ecommerce", 330, chunk=100)
    args = ("index", "build", "ecommerce", "--embedder", "hashing", "--batch-rows", "50", "--no-progress")
    killed = prore(ws, *args, env={KILL_ENV: kill_at})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = json.loads((ws / "indexes" / "ecommerce" / "v0001" / JOURNAL).read_text())
    assert not (ws / "indexes" / "ecommerce" / "CURRENT").exists()  # nothing was published
    if kill_at == "clickhouse:3":
        # Chunk 3 reached ClickHouse but was never committed: the rerun must not duplicate it.
        assert (journal["chunks"], journal["rows"]) == (3, 150)
    resumed = prore(ws, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "published v0001 with 330 docs" in resumed.stdout
    if kill_at == "clickhouse:3":
        assert "(resumed at chunk 3)" in resumed.stdout
    info = info_json(ws, "ecommerce")
    assert info["current"] == "v0001" and info["rows"] == 330
    assert info["clickhouse_rows"] == info["milvus_entities"] == 330
    assert set(info["bm25_docs"].values()) == {330}
    again = prore(ws, *args)
    assert "up to date" in again.stdout and again.returncode == 0


def _config_file(cfg: Config, tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {"clickhouse": {"chdb_path": cfg.clickhouse.chdb_path, "database": cfg.clickhouse.database}}
        )
    )
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "args,code",
    [
        (["index", "build", "books"], "corpus"),
        (["index", "build", "email"], "no_corpus"),
        (["index", "build", "ecommerce", "--embedder", "word2vec"], "unknown_embedder"),
        (["index", "build", "ecommerce", "--index-type", "IVF_PQ"], "index_type"),
        (["index", "build", "ecommerce", "--batch-rows", "many"], "config"),
        (["index", "build", "ecommerce", "--batch-rows", "0"], "bad_batch_rows"),
        (["index", "info", "books"], "corpus"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str],
    code: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    workspace_config: Callable[..., Config],
    write_synthetic_corpus: Callable[..., Any],
) -> None:
    cfg = workspace_config("bad")
    write_synthetic_corpus(cfg, "ecommerce", 20)
    rc, out, err = _run(
        capsys, "--workspace", str(cfg.workspace), "--config", _config_file(cfg, tmp_path), *args
    )
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error {code}: ")
    assert not (cfg.workspace / "indexes" / "ecommerce" / "CURRENT").exists()


def test_bad_domain_exits_2_from_a_real_process(tmp_path: Path) -> None:
    done = prore(tmp_path, "index", "build", "books")
    assert done.returncode == 2
    assert done.stderr == "error corpus: unknown domain 'books'; choose one of ecommerce, email\n"


def test_build_and_info_in_text_and_json(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    workspace_config: Callable[..., Config],
    write_synthetic_corpus: Callable[..., Any],
) -> None:
    cfg = workspace_config("info")
    write_synthetic_corpus(cfg, "email", 90)
    base = ["--workspace", str(cfg.workspace), "--config", _config_file(cfg, tmp_path)]
    rc, out, _ = _run(capsys, *base, "index", "info")
    assert rc == 0 and "current version  none (run: prore index build email)" in out
    assert "corpus rows      none (run: prore corpus build ecommerce)" in out
    rc, out, _ = _run(capsys, *base, "--embedder", "hashing", "index", "build", "email", "--no-progress")
    assert rc == 0 and out == "email: published v0001 with 90 docs (built)\n"
    rc, out, _ = _run(capsys, *base, "index", "info", "email")
    assert rc == 0
    for line in ("current version  v0001", "clickhouse rows  90", "milvus entities  90", "bm25 docs        subject=90, body=90",
                 "embedder         text=hashing-256 (256d)", "other versions   none"):  # fmt: skip
        assert line in out
    rc, out, _ = _run(capsys, *base, "index", "info", "email", "--json")
    info = json.loads(out)[0]
    assert (info["current"], info["corpus_rows"], info["clickhouse_rows"], info["milvus_entities"]) == (
        "v0001",
        90,
        90,
        90,
    )
    assert info["versions"] == [{"version": "v0001", "state": "complete", "chunks": 1, "rows": 90}]
