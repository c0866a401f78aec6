"""``core.openmp``: `prore` and the test suite start torch's OpenMP runtime with passive waiting, and their
children inherit it. libgomp says what it read when ``OMP_DISPLAY_ENV=VERBOSE``: a spin count of 0 under
``PASSIVE``, 300,000 under its default. A libgomp loaded before Python runs (``LD_PRELOAD``) has read its
environment already: then only the children wait passively, and :func:`wait_passively` says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.openmp import ENV

torch = pytest.importorskip("torch")

MATMUL = "import torch; torch.ones(256, 256) @ torch.ones(256, 256)"
WAIT = "from core.openmp import wait_passively; print(wait_passively()); "
LIBGOMP = sorted(Path(torch.__file__).parent.joinpath("lib").glob("libgomp*.so*"))


def run(code: str, **env: str) -> tuple[list[int], str]:
    """libgomp's spin count in each process that loads it, and what was printed, from a fresh process that runs
    ``code`` (the environment without ``OMP_WAIT_POLICY``, plus ``env``)."""
    base = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = [int(n) for n in re.findall(r"GOMP_SPINCOUNT = '(\d+)'", done.stderr)]
    assert found, done.stderr[-2000:]
    return found, done.stdout.strip()


def preloaded(**env: str) -> bool:
    """Whether a fresh Python has an OpenMP runtime loaded before it imports torch (``LD_PRELOAD``), as
    :func:`core.openmp.openmp_loaded` sees it."""
    code = "from core.openmp import openmp_loaded; print(openmp_loaded())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )
    return out.stdout.strip() == "True"


def test_libgomp_spins_by_default_and_not_once_told_to_wait_passively() -> None:
    assert run(MATMUL)[0][0] > 0
    counts, applied = run(WAIT + MATMUL)
    assert applied == str(not preloaded())
    assert (counts == [0]) == (applied == "True"), (counts, applied)


@pytest.mark.skipif(not LIBGOMP, reason="this torch build ships no libgomp of its own")
def test_a_runtime_loaded_before_python_is_reported_and_only_the_children_wait_passively() -> None:
    env = {"LD_PRELOAD": str(LIBGOMP[0])}
    assert preloaded(**env)
    child = f"subprocess.run([sys.executable, '-c', {MATMUL!r}], check=True)"
    counts, applied = run("import subprocess, sys; " + WAIT + MATMUL + "; " + child, **env)
    assert applied == "False"
    assert counts[0] > 0 and counts[1:] == [0]


def test_a_value_in_the_environment_wins() -> None:
    counts, applied = run(WAIT + MATMUL, **{ENV: "ACTIVE"})
    assert counts[0] > 0 and applied == "False"


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
    counts, _ = run(code)
    assert counts[1:] == [0]
    assert (counts[0] == 0) != preloaded(), (
        "the command's own runtime waits passively unless one was preloaded"
    )


def test_the_suite_itself_waits_passively() -> None:
    from tests import conftest

    assert os.environ.get(ENV)
    assert conftest.OPENMP_BEFORE_TORCH, "tests/conftest.py sets it before anything imports torch"
