"""Errors of benchmark synthesis and loading."""

from __future__ import annotations

from core.errors import ProReError


class BenchError(ProReError):
    """A benchmark cannot be built or read: bad sizes, no index, a missing or stale split."""

    code = "bench"
