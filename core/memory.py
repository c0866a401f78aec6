"""Keep the C allocator from handing freed memory back to the kernel during batch work on CPU.

PyTorch on CPU allocates its large buffers (activations, logits, attention scores, gradients) with the C
library's ``malloc`` and frees them at the end of every step. glibc serves blocks above its mmap threshold
with a fresh ``mmap`` and returns them with ``munmap`` on free, and trims the heap's free top back to the
kernel; the next step then page-faults the same amount of memory in again, each page zeroed by the kernel.
A 20-step SFT run of the smallest planner took 7.3 million page faults that way, about a third of its CPU time
(``bench/memory.py`` measures it). Told to serve every block from its heap (``M_MMAP_MAX`` 0) and never
to trim it (``M_TRIM_THRESHOLD`` at its largest), glibc reuses the same pages from step to step.

The cost is that a process keeps its peak heap until it ends, which is what a training, index build or
evaluation run does anyway; long-running servers are left alone. PyTorch's own CPU docs and vLLM's CPU
backend recommend a caching allocator (jemalloc, tcmalloc) preloaded for the same reason; this needs no
preload and no extra package, only glibc's ``mallopt`` (through :mod:`ctypes`). Elsewhere (musl, macOS) it
does nothing. ``PRORE_KEEP_FREED_MEMORY=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
"""glibc's ``mallopt`` parameters (malloc.h)."""

ENV = "PRORE_KEEP_FREED_MEMORY"
"""Set it to ``0`` to leave the allocator as it is."""


def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep freed memory for reuse in this process; True where it took effect.

    Applies to every thread of the process from the call on; processes it starts later are not affected.
    """
    if os.environ.get(ENV, "1").strip() == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success
    return bool(mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1)
