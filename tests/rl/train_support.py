"""Shared constants of the local-training tests (their benchmark is the ``train_bench`` fixture, conftest.py)."""

from __future__ import annotations

from pathlib import Path

from indexing.workspace import Workspace

DOMAINS = ("ecommerce", "email")
TINY = ["--size", "xs", "--batch-size", "8", "--eval-steps", "3", "--logging-steps", "1"]
"""SFT flags of the tests: the 0.3M-parameter model, three steps between validations."""


def train_tiny_sft(bench: Workspace, out: Path, steps: int) -> Path:
    """``prore train sft`` of the :data:`TINY` model on ``bench`` for ``steps`` steps into ``out``; its final
    checkpoint."""
    from prore.cli import main

    argv = [
        "--workspace",
        str(bench.root),
        "train",
        "sft",
        *TINY,
        "--max-steps",
        str(steps),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out / "final"
