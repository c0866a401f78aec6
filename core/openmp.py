"""Let OpenMP's idle threads sleep rather than spin, so that processes sharing the cores do not starve each other.

PyTorch's CPU kernels (training, MiniLM's embeddings, vLLM's CPU backend) run on GNU OpenMP, one thread per
core by default. Between two parallel regions libgomp's threads spin for a while before they sleep
(``OMP_WAIT_POLICY`` unset). On cores of their own that costs little; on cores another process needs, the
spinning threads hold them while that process waits. Two trainers of the ``t`` planner at once on 2 cores each
took 19-92 s for 30 steps that took 9-11 s with ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep as soon as a region
ends); alone, passive waiting cost between nothing and a seventh of the wall time (``bench/omp_wait.py``). A machine that runs a trainer beside the
reward service, vLLM beside the query API, or several evaluations at once is the shared case.

libgomp reads the variable once, when it is loaded (with torch, or at start-up where ``LD_PRELOAD`` names it), so
:func:`wait_passively` must run before that to change the calling process; the processes it starts inherit it
either way, and :func:`wait_passively` says which of the two it achieved. A value the environment already has
wins.
"""

from __future__ import annotations

import os
import sys

ENV = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"


def openmp_loaded() -> bool:
    """Whether this process has already loaded an OpenMP runtime, which has then read its environment: torch is
    imported, or a libgomp is mapped (``LD_PRELOAD``, another library's own copy). Where ``/proc`` cannot be
    read, only the first is known."""
    if "torch" in sys.modules:
        return True
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def wait_passively() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets it; True where this process's own OpenMP
    runtime will read it (none loaded yet), False where only the processes it starts will (a runtime already
    read its environment), or where the environment's own value was kept.

    >>> import os
    >>> os.environ[ENV] = "ACTIVE"
    >>> wait_passively(), os.environ[ENV]
    (False, 'ACTIVE')
    >>> del os.environ[ENV]
    >>> _ = wait_passively(); os.environ[ENV]
    'PASSIVE'
    """
    if os.environ.get(ENV):
        return False
    loaded = openmp_loaded()
    os.environ[ENV] = PASSIVE
    return not loaded
