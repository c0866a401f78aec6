"""core.processes with real processes: a server waited for until it answers, a process that exits while
starting or never answers (one typed line with its log's tail), and a process group stopped whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from core import processes
from core.processes import NotReady
from indexing.errors import StoreUnavailable
from indexing.stores.server import free_port


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie that its new parent has not reaped yet counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _wait_for_file(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not (path.is_file() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.05)
    return path.read_text().strip()


def test_served_waits_until_the_url_answers_and_stops_the_server(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    # The server listens only after a second: the wait must outlast refused connections.
    command = _python(
        f"import runpy, sys, time; time.sleep(1); sys.argv = ['http.server', '--bind', '127.0.0.1', '{port}']; "
        "runpy.run_module('http.server', run_name='__main__')"
    )
    started = time.monotonic()
    with processes.served(command, url, tmp_path / "server.log", what="the file server", timeout_s=60,
                          poll_s=0.1, cwd=tmp_path) as proc:  # fmt: skip
        assert time.monotonic() - started >= 1
        assert httpx.get(url, timeout=5).status_code == 200
        assert os.getpgid(proc.pid) == proc.pid  # it leads a group of its own
    assert proc.returncode == -signal.SIGTERM  # it stopped on SIGTERM, within the grace period


def test_an_early_exit_fails_at_once_typed_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = processes.spawn(
        _python("import sys; print('starting'); print('error: bad flag --pot'); sys.exit(3)"), log
    )
    started = time.monotonic()
    with pytest.raises(NotReady) as failed:
        processes.wait_ready(
            f"http://127.0.0.1:{free_port()}/", what="the server", timeout_s=60, running=proc, log=log
        )
    assert time.monotonic() - started < 30  # not the deadline
    message = str(failed.value)
    assert message.startswith("the server exited with 3 before it answered")
    assert message.endswith("starting | error: bad flag --pot")
    assert "\n" not in message and failed.value.code == "not_ready" and failed.value.retryable


def test_a_deadline_is_typed_and_stops_the_process(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    port = free_port()
    command = _python("import os, time; print('still loading', os.getpid(), flush=True); time.sleep(600)")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as failed, processes.served(
        command, processes.listening("127.0.0.1", port), log, what="the slow server", timeout_s=2, poll_s=0.2,
        error=StoreUnavailable,
    ):  # fmt: skip
        pytest.fail("the block was entered")
    assert 2 <= time.monotonic() - started < 30
    message = str(failed.value)
    assert message.startswith("the slow server did not answer within 2 s: ")
    pid = int(log.read_text().split()[-1])
    assert "refused" in message.lower() and message.endswith(f"{log} ends with: still loading {pid}")
    assert "\n" not in message and failed.value.code == "store_unavailable"
    assert _gone(pid)  # stopped on the way out


def test_a_callable_check_and_a_thread_that_ends(tmp_path: Path) -> None:
    ready = threading.Event()
    threading.Timer(0.3, ready.set).start()
    processes.wait_ready(ready.is_set, what="the event", timeout_s=30, poll_s=0.02)
    with pytest.raises(NotReady, match=r"^the worker thread exited before it answered$"):
        processes.wait_ready(lambda: False, what="the worker thread", timeout_s=30, running=lambda: False)
    with pytest.raises(NotReady, match=r"^the flag did not answer within 0\.3 s$"):
        processes.wait_ready(lambda: False, what="the flag", timeout_s=0.3, poll_s=0.05)


def test_stop_kills_the_whole_group_after_the_grace_period(tmp_path: Path) -> None:
    """A parent and its child both ignore SIGTERM: after the grace period both get SIGKILL."""
    child_pid = tmp_path / "child.pid"
    script = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); "
        f"open({str(child_pid)!r}, 'w').write(str(child.pid)); time.sleep(600)"
    )
    proc = processes.spawn(_python(script), tmp_path / "group.log")
    child = int(_wait_for_file(child_pid))
    time.sleep(0.3)  # both have set their SIGTERM handlers
    started = time.monotonic()
    processes.stop(proc, grace_s=1)
    assert 1 <= time.monotonic() - started < 20
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not _gone(child):
        assert time.monotonic() < deadline, "the child outlived its group"
        time.sleep(0.05)


def test_stop_and_kill_by_pid_and_a_process_outside_any_group_of_its_own(tmp_path: Path) -> None:
    # A pid (a server another process started): polled until it has ended; a zombie counts as ended.
    proc = processes.spawn(_python("import time; time.sleep(600)"), tmp_path / "a.log")
    processes.stop(proc.pid, grace_s=10)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    proc = processes.spawn(_python("import time; time.sleep(600)"), tmp_path / "b.log")
    processes.kill(proc.pid)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    # A child in this process's group (a worker that Ctrl-C should reach): signalled alone.
    worker = subprocess.Popen(_python("import time; time.sleep(600)"))
    assert os.getpgid(worker.pid) == os.getpgid(0)
    processes.stop(worker, grace_s=10)
    assert worker.returncode == -signal.SIGTERM
    processes.stop(worker)  # an ended process: nothing happens
