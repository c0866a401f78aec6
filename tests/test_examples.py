"""Every numbered example under ``examples/`` runs to completion, as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("[0-9][0-9]_*.py"))


def test_examples_exist() -> None:
    assert EXAMPLES, "no numbered examples under examples/"
    assert EXAMPLES[0].name.startswith("01_")


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path, vector_cache: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PRORE_WORKSPACE": str(tmp_path),
        "PRORE_VECTOR_CACHE": str(vector_cache),  # the examples that index the same corpus embed it once
    }
    proc = subprocess.run(
        [sys.executable, str(example)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "an example should show what it did"
    assert "Traceback" not in proc.stderr
