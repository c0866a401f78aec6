"""Processes the project starts and waits for: spawned in a session of their own, waited for until they
answer, stopped with every process they started.

The one way to run a server as a process of its own (the local Milvus server, a Milvus Lite gRPC server,
the tests' vLLM and KServe servers) and to wait for anything that must come up before it is used (a
uvicorn server in a thread):

- :func:`spawn` starts a command as the leader of a new session, stdout and stderr to a log file;
- :func:`wait_ready` runs a readiness check every ``poll_s`` (a URL that must answer 200, :func:`listening`,
  or any callable) until it passes. It fails at once when the process ends first, and when ``timeout_s``
  has passed, with one typed, one-line error (:class:`NotReady`, or the caller's ``error``) that ends
  with the tail of the log;
- :func:`stop` sends SIGTERM to the process group, SIGKILL after a grace period; :func:`kill` only SIGKILL;
- :func:`served` is the three as a context manager.

A process is a :class:`subprocess.Popen` this process started, or the pid of one started elsewhere (a
server that ``prore stores up`` left running), with an optional check of whether it still runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from core.errors import ProReError, require

TAIL_BYTES = 2000
"""How much of the end of a log a failed wait quotes."""

Process: TypeAlias = subprocess.Popen[Any] | int
"""A process started here, or the pid of one started elsewhere."""


class NotReady(ProReError):
    """A process ended before it answered, or did not answer within its deadline."""

    code = "not_ready"
    retryable = True


def spawn(
    command: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    append: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` (in ``cwd``) as the leader of a new session, so that it and every process it starts
    are one process group that :func:`stop` ends together; stdin is ``/dev/null``, stdout and stderr go to
    ``log`` (appended to with ``append``)."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
        )  # fmt: skip


def wait_ready(
    ready: str | Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    poll_s: float = 0.5,
    running: Process | Callable[[], bool] | None = None,
    log: Path | None = None,
    error: Callable[[str], BaseException] = NotReady,
) -> None:
    """Return once ``ready`` passes: a URL that answers a GET with 200, or a callable that returns ``True``
    (``False`` or an exception means not yet; the last exception is the reason a timeout gives).

    ``running`` is what is waited for: a :class:`~subprocess.Popen`, a pid, or a callable that says whether
    it still runs (a thread's ``is_alive``). Once it has ended, or ``timeout_s`` has passed, raises
    ``error`` (default :class:`NotReady`) with one line naming ``what`` and ending with the tail of ``log``.
    """
    check = _answers_200(ready) if isinstance(ready, str) else ready
    still_running = None if running is None else running if callable(running) else _is_running(running)
    deadline = time.monotonic() + timeout_s
    reason = ""
    while True:
        if still_running is not None and not still_running():
            code = running.poll() if isinstance(running, subprocess.Popen) else None
            ended = f"exited with {code}" if code is not None else "exited"
            raise error(f"{what} {ended} before it answered{_log_tail(log)}")
        try:
            if check():
                return
        except Exception as exc:
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            because = f": {reason}" if reason else ""
            raise error(f"{what} did not answer within {timeout_s:g} s{because}{_log_tail(log)}")
        time.sleep(min(poll_s, left))


def listening(host: str, port: int, *, timeout_s: float = 1.0) -> Callable[[], bool]:
    """A readiness check for :func:`wait_ready`: something accepts TCP connections on ``host:port``."""

    def check() -> bool:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True

    return check


def stop(process: Process, *, grace_s: float = 30.0, running: Callable[[], bool] | None = None) -> None:
    """Stop ``process`` with every process it started: SIGTERM to its process group (to it alone if it leads
    none), SIGKILL after ``grace_s``, then SIGKILL to whatever is left of the group.

    A :class:`~subprocess.Popen` is waited for and reaped; a pid is polled with ``running`` (default: it
    exists and is no zombie) until it has ended. Nothing happens to a process that has already ended.
    """
    still_running = running or _is_running(process)
    if still_running():
        _signal(process, signal.SIGTERM)
        if not _ended_within(process, still_running, grace_s):
            kill(process, running=running)
    _signal(process, signal.SIGKILL, group_only=True)  # what it started and left behind


def kill(process: Process, *, running: Callable[[], bool] | None = None) -> None:
    """SIGKILL ``process`` and its process group (what a crash does) and return once it has ended."""
    still_running = running or _is_running(process)
    if still_running():
        _signal(process, signal.SIGKILL)
        _ended_within(process, still_running, None)


@contextlib.contextmanager
def served(
    command: Sequence[str],
    ready: str | Callable[[], bool],
    log: Path,
    *,
    what: str,
    timeout_s: float,
    poll_s: float = 0.5,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    grace_s: float = 30.0,
    error: Callable[[str], BaseException] = NotReady,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (:func:`spawn`) until the block ends, entered once ``ready`` passes (:func:`wait_ready`);
    the process group is stopped (:func:`stop`) on the way out, whether the wait failed or not."""
    proc = spawn(command, log, env=env, cwd=cwd)
    try:
        wait_ready(ready, what=what, timeout_s=timeout_s, poll_s=poll_s, running=proc, log=log, error=error)
        yield proc
    finally:
        stop(proc, grace_s=grace_s)


def log_tail(log: Path, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``log`` on one line (its lines joined by `` | ``); empty if unreadable."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            data = f.read()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in data.decode(errors="replace").splitlines() if line.strip())


def _log_tail(log: Path | None) -> str:
    """The end of an error message that quotes ``log``."""
    if log is None:
        return ""
    tail = log_tail(log)
    return f"; {log} ends with: {tail}" if tail else f"; {log} is empty"


def _answers_200(url: str) -> Callable[[], bool]:
    httpx: Any = require("httpx", "serve")

    def check() -> bool:
        status = httpx.get(url, timeout=2.0).status_code
        if status != 200:
            raise NotReady(f"GET {url} answered {status}")
        return True

    return check


def _is_running(process: Process) -> Callable[[], bool]:
    if isinstance(process, subprocess.Popen):
        return lambda: process.poll() is None
    return lambda: pid_running(process)


def pid_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # gone, or no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state != "Z"


def _ended_within(process: Process, running: Callable[[], bool], timeout_s: float | None) -> bool:
    """Wait up to ``timeout_s`` (``None``: for as long as it takes) for ``process`` to end; whether it did."""
    if isinstance(process, subprocess.Popen):
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while running():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _signal(process: Process, sig: signal.Signals, *, group_only: bool = False) -> None:
    """Send ``sig`` to the process group ``process`` leads, or (unless ``group_only``) to it alone if it
    leads none."""
    pid = process.pid if isinstance(process, subprocess.Popen) else process
    try:
        os.killpg(pid, sig)
        return
    except PermissionError:
        return
    except ProcessLookupError:  # it leads no group (or the group is gone)
        if group_only:
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if isinstance(process, subprocess.Popen):
            process.send_signal(sig)  # nothing once it has been reaped
        else:
            os.kill(pid, sig)
