"""``core.memory``: glibc keeps a batch job's freed buffers for reuse instead of page-faulting them in again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from core.memory import ENV, keep_freed_memory
from prore.cli import BATCH_COMMANDS, build_parser

glibc = pytest.mark.skipif(os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's mallopt only")

# Twenty rounds of a 64 MB buffer from malloc, written and freed, as a training step's activations are;
# prints the process's minor page faults over the rounds.
ROUNDS = textwrap.dedent(
    """
    import ctypes, resource, sys
    from core.memory import keep_freed_memory
    print(keep_freed_memory(), file=sys.stderr)
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 64 << 20
    def round():
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        libc.free(block)
    round()  # the first round maps the memory in either way
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        round()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _faults(keep: str) -> int:
    run = subprocess.run([sys.executable, "-c", ROUNDS], capture_output=True, text=True, timeout=120,
                         env={**os.environ, ENV: keep})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().splitlines()[-1] == str(keep == "1")
    return int(run.stdout)


@glibc
def test_kept_buffers_are_reused_without_faulting_their_pages_in_again() -> None:
    returned, kept = _faults("0"), _faults("1")
    assert returned >= 20 * 15_000, "glibc hands each 64 MB buffer back and faults it in again"
    assert kept < returned / 10, (kept, returned)


def test_it_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "0")
    assert keep_freed_memory() is False


def test_the_batch_commands_are_commands_of_prore() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert commands is not None and set(commands) >= BATCH_COMMANDS
    assert not BATCH_COMMANDS & {"serve", "reward", "stores"}, "servers keep glibc's defaults"
