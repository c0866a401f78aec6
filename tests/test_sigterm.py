"""A suite stopped with SIGTERM (what a job runner or ``kill`` sends) still stops the servers its fixtures
started: they lead sessions of their own, so only the fixtures' teardown reaches them
(:func:`tests.processes.interrupt_on_sigterm`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from core.processes import pid_running
from tests.processes import inner_suite_env

CONFTEST = """
import sys
from pathlib import Path

import pytest

from tests.processes import interrupt_on_sigterm, served


def pytest_configure(config):
    interrupt_on_sigterm()


def pytest_runtest_teardown(item):
    interrupt_on_sigterm()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    with served(command, lambda: True, tmp_path_factory.mktemp("s") / "server.log", what="a server",
                timeout_s=30) as proc:
        yield proc
"""

TEST = """
import os
import signal
import time
from pathlib import Path


def test_a_library_takes_sigterm(server):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as ray.init does with a handler of its own


def test_waits(server):
    Path(os.environ["SERVER_PID_FILE"]).write_text(str(server.pid))  # the outer test's cue to send SIGTERM
    time.sleep(600)
"""


def _signal_state(pid: int) -> str:
    """The pending, blocked, ignored and caught signal masks of ``pid``, as ``/proc`` shows them."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "(ended)"
    return ", ".join(
        line.replace("\t", " ")
        for line in lines
        if line.startswith(("State", "ShdPnd", "SigPnd", "SigBlk", "SigIgn", "SigCgt"))
    )


def _output_within(suite: subprocess.Popen[str], timeout_s: float) -> str:
    """What ``suite`` printed by the time it ended, within ``timeout_s``; if it does not end, the test fails
    with its signal masks and the Python stacks that SIGABRT makes pytest's faulthandler print."""
    try:
        return suite.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        state = _signal_state(suite.pid)
        suite.send_signal(signal.SIGABRT)
        try:
            out = suite.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            suite.kill()
            out = suite.communicate()[0]
        raise AssertionError(
            f"the suite did not end {timeout_s:.0f} s after SIGTERM ({state}):\n{out[-4000:]}"
        ) from None


def test_a_suite_stopped_with_sigterm_stops_its_fixtures_servers(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("import os\n" + CONFTEST)
    (tmp_path / "test_inner.py").write_text(TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    pid_file = tmp_path / "server.pid"
    env = inner_suite_env(SERVER_PID_FILE=str(pid_file))
    suite = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert suite.poll() is None, suite.communicate()[0][-2000:]
            assert time.monotonic() < deadline, "the inner suite never started its server"
            time.sleep(0.1)
        server = int(pid_file.read_text())
        assert pid_running(server)
        suite.send_signal(signal.SIGTERM)
        out = _output_within(suite, 120)
    finally:
        if suite.poll() is None:
            suite.kill()
    assert "KeyboardInterrupt" in out, out[-2000:]
    deadline = time.monotonic() + 60
    while pid_running(server):
        assert time.monotonic() < deadline, f"the server (pid {server}) outlived the suite:\n{out[-2000:]}"
        time.sleep(0.2)


BENCH = """
import subprocess
import sys
import time

sys.path.insert(0, sys.argv[1])
import common  # noqa: E402,F401  (what every bench/ script imports first)

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
try:
    open(sys.argv[2], "w").write(str(child.pid))
    time.sleep(600)
finally:
    child.terminate()
    child.wait()
"""


def test_a_benchmark_stopped_with_sigterm_runs_its_cleanup(tmp_path: Path) -> None:
    """``bench/common.py`` turns SIGTERM into ``SystemExit``: a bench stopped by ``timeout`` stops the servers it
    started in its ``finally`` and ``with`` blocks (one had left a server holding its workspace's chDB)."""
    script, pid_file = tmp_path / "bench_like.py", tmp_path / "child.pid"
    script.write_text(BENCH)
    bench_dir = Path(__file__).resolve().parent.parent / "bench"
    run = subprocess.Popen([sys.executable, str(script), str(bench_dir), str(pid_file)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert run.poll() is None, run.communicate()[0][-2000:]
            assert time.monotonic() < deadline, "the bench never started its child"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert pid_running(child)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if run.poll() is None:
            run.kill()
    assert not pid_running(child)
