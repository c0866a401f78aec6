"""``make test`` runs on pytest-xdist workers with ``--dist loadgroup``: the tests that share a session server
must land on one worker, or each worker starts its own (tests/conftest.py, ``XDIST_GROUPS``). pytest 9.2 made
the group marks silently ineffective (pytest-xdist issue 1386); this runs a small suite the same way and
checks that the installed pytest and pytest-xdist still group."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    assert i >= 0
"""


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    passed = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", run.stdout, re.M)
    assert len(passed) == 8, run.stdout[-2000:]
    assert all(node.endswith("@shared") for _, node in passed), passed
    assert len({worker for worker, _ in passed}) == 1, passed
