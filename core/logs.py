"""Logging helpers: library warnings that duplicate a typed error, and how long a start-up stage took.

A bad input gets one line, ``error <code>: <message>``. Some libraries also log a warning about the same
failure (sqlglot about a JSON path of a program that is then refused, clickhouse-connect about a server
that the store reports as unavailable); :func:`drop_messages` removes exactly those records.

A service that takes a while to become ready says what it is doing: :func:`timed` logs each stage it wraps with
its seconds, so a slow start can be read off the log.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def drop_messages(logger: str, prefix: str) -> None:
    """Drop the records of ``logger`` whose message starts with ``prefix``; other records pass."""
    logging.getLogger(logger).addFilter(_DropPrefix(prefix))


@contextlib.contextmanager
def timed(log: logging.Logger, what: str) -> Iterator[None]:
    """Log ``what: N.N s`` at INFO once the block has run (also when it raises, with ``failed`` added).

    >>> import sys
    >>> logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s", force=True)
    >>> with timed(logging.getLogger("start"), "nothing"):
    ...     pass  # doctest: +ELLIPSIS
    nothing: 0.0 s
    """
    start = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        log.info("%s: %.1f s%s", what, time.perf_counter() - start, "" if ok else " (failed)")
