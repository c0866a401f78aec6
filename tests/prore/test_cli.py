"""The ``prore`` entry point: exit codes, with retryable failures apart from bad input."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from indexing.config import Config
from prore.cli import EXIT_BAD_INPUT, EXIT_RETRYABLE, main

pytest.importorskip("chdb", reason="needs the clickhouse extra")

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_unreachable_store_exits_with_the_retryable_code(
    indexed: tuple[Config, str], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, config = indexed
    url = f"http://127.0.0.1:{_closed_port()}"
    rc = main(
        [
            "--workspace",
            str(cfg.workspace),
            "--config",
            config,
            "--clickhouse-url",
            url,
            "index",
            "info",
            "email",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_RETRYABLE == 75
    assert err[-1].startswith("error store_unavailable: ")
    # A permanent error keeps the bad-input code.
    rc = main(["--workspace", str(cfg.workspace), "index", "info", "books"])
    assert rc == EXIT_BAD_INPUT == 2
    assert capsys.readouterr().err.startswith("error corpus: ")


def test_the_process_exit_status_is_the_retryable_code(indexed: tuple[Config, str]) -> None:
    cfg, config = indexed
    done = subprocess.run(
        [sys.executable, "-m", "prore", "--workspace", str(cfg.workspace), "--config", config,
         "--clickhouse-url", f"http://127.0.0.1:{_closed_port()}", "index", "info", "email"],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 75, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error store_unavailable: "), done.stderr


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("exit status", "0 success", "2 ", "75 ", "retry"):
        assert text in out, text
