"""``core.openmp``: `prore` and the test suite start torch's OpenMP runtime with passive waiting, and their
children inherit it. libgomp says what it read when ``OMP_DISPLAY_ENV=VERBOSE``: a spin count of 0 under
``PASSIVE``, 300,000 under its default."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from core.openmp import ENV

pytest.importorskip("torch")

MATMUL = "import torch; torch.ones(256, 256) @ torch.ones(256, 256)"


def spin_counts(code: str, **env: str) -> list[int]:
    """libgomp's spin count in each process that loads it, from a fresh process that runs ``code`` (the
    environment without ``OMP_WAIT_POLICY``, plus ``env``)."""
    base = {k: v for k, v in os.environ.items() if k != ENV}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    found = [int(n) for n in re.findall(r"GOMP_SPINCOUNT = '(\d+)'", run.stderr)]
    assert found, run.stderr[-2000:]
    return found


def test_libgomp_spins_by_default_and_not_once_told_to_wait_passively() -> None:
    assert spin_counts(MATMUL)[0] > 0
    assert spin_counts("from core.openmp import wait_passively; wait_passively(); " + MATMUL) == [0]


def test_a_value_in_the_environment_wins() -> None:
    code = "from core.openmp import wait_passively; wait_passively(); " + MATMUL
    assert spin_counts(code, **{ENV: "ACTIVE"})[0] > 0


def test_prore_waits_passively_and_so_do_the_processes_it_starts() -> None:
    # The command line is parsed after the policy is set, so even --help has set it; a child started by the
    # same process (as `prore` starts vLLM, verl and its workers) inherits it.
    code = (
        "import subprocess, sys\n"
        "from prore.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"{MATMUL}\n"
        f"subprocess.run([sys.executable, '-c', {MATMUL!r}], check=True)\n"
    )
    assert spin_counts(code) == [0, 0]


def test_the_suite_itself_waits_passively() -> None:
    assert os.environ.get(ENV), "tests/conftest.py sets it before torch loads"
