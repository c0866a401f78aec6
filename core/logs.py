"""Library warnings that duplicate a typed error the project reports itself.

A bad input gets one line, ``error <code>: <message>``. Some libraries also log a warning about the same
failure (sqlglot about a JSON path of a program that is then refused, clickhouse-connect about a server
that the store reports as unavailable); :func:`drop_messages` removes exactly those records.
"""

from __future__ import annotations

import logging


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def drop_messages(logger: str, prefix: str) -> None:
    """Drop the records of ``logger`` whose message starts with ``prefix``; other records pass."""
    logging.getLogger(logger).addFilter(_DropPrefix(prefix))
