"""Global options (``--workspace``, ``--config``, the store URLs, ``--embedder``) before or after the command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config
from prore.cli import build_parser, main


def _info(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    data: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return data[0]


def test_global_options_are_accepted_before_and_after_the_command(
    indexed: tuple[Config, str], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, config = indexed
    ws = str(cfg.workspace)
    before = _info(capsys, ["--workspace", ws, "--config", config, "index", "info", "email", "--json"])
    after = _info(capsys, ["index", "info", "email", "--json", "--workspace", ws, "--config", config])
    mixed = _info(capsys, ["--config", config, "index", "info", "--workspace", ws, "email", "--json"])
    assert before == after == mixed
    assert before["current"] == "v0001" and before["corpus_rows"] == 40


def test_the_last_position_wins_and_every_command_takes_them(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["--workspace", "a", "index", "info", "--workspace", "b"])
    assert args.workspace == "b"
    args = parser.parse_args(["--workspace", "a", "index", "info"])
    assert args.workspace == "a"  # the command's own (absent) option does not reset it
    for argv in (
        ["index", "build", "email", "--workspace", "w", "--embedder", "hashing"],
        ["corpus", "build", "email", "--size", "5", "--workspace", "w"],
        ["execute", "--workspace", "w", "--milvus-uri", "http://m:19530"],
        ["bench", "show", "email", "--workspace", "w", "--clickhouse-url", "http://c:8123"],
        ["eval", "compare", "--workspace", "w", "--config", "c.yaml"],
        ["eval", "email", "--method", "bm25", "--workspace", "w"],
    ):
        args = parser.parse_args(argv)
        assert args.workspace == "w", argv
    assert parser.parse_args(["index", "build", "email", "--embedder", "hashing"]).embedder == "hashing"


def test_index_build_with_the_workspace_after_the_command(
    tmp_path: Path, workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any],
    write_config: Callable[[Config, Path], str], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    cfg = workspace_config("after")
    write_synthetic_corpus(cfg, "email", 12)
    config = write_config(cfg, tmp_path)
    rc = main(["index", "build", "email", "--workspace", str(cfg.workspace), "--config", config,
               "--embedder", "hashing", "--no-progress"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert capsys.readouterr().out == "email: published v0001 with 12 docs (built)\n"
