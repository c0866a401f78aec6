"""``make test`` runs on pytest-xdist workers with ``--dist loadgroup``: the tests that share a session server
must land on one worker, or each worker starts its own (tests/conftest.py, ``XDIST_GROUPS``). pytest 9.2 made
the group marks silently ineffective (pytest-xdist issue 1386); this runs a small suite the same way and
checks that the installed pytest and pytest-xdist still group."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.processes import inner_suite_env

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
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=inner_suite_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    passed = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", run.stdout, re.M)
    assert len(passed) == 8, run.stdout[-2000:]
    assert all(node.endswith("@shared") for _, node in passed), passed
    assert len({worker for worker, _ in passed}) == 1, passed


SERVER_CONFTEST = """
import subprocess
import sys

import pytest

from tests.conftest import pytest_collection_modifyitems, pytest_runtest_teardown, until_last_user  # noqa: F401


@pytest.fixture(scope="session")
def milvus_server():  # a stand-in server under a session server's name, so it has that server's group
    with until_last_user("milvus_server") as stack:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        stack.callback(lambda: (proc.terminate(), proc.wait()))
        yield proc.pid
"""

SERVER_TESTS = """
import pytest

from core.processes import pid_running as alive


def test_not_a_user():  # collected first, run after the group (groups are collected first)
    assert not alive(PIDS["server"]), "the server outlived its last user"


@pytest.mark.parametrize("i", range(2))
def test_user(milvus_server, i):
    PIDS["server"] = milvus_server
    assert alive(milvus_server)


@pytest.mark.xdist_group("milvus-lite")
def test_user_through_the_request(request):  # its group, not its arguments, says it is a user
    assert alive(request.getfixturevalue("milvus_server"))


PIDS = {}
"""


def test_a_session_server_stops_after_its_last_user(tmp_path: Path) -> None:
    """``tests.conftest.until_last_user``: a session server stops once the last test of its group is torn down,
    not at the end of the session, and not before a test that reaches it through ``request``."""
    (tmp_path / "conftest.py").write_text(SERVER_CONFTEST)
    (tmp_path / "test_server.py").write_text(SERVER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=inner_suite_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    order = re.findall(r"::(\w+(?:\[\d\])?)\S* PASSED", run.stdout)
    assert order == ["test_user[0]", "test_user[1]", "test_user_through_the_request", "test_not_a_user"], (
        order
    )
