"""What the loaders of the real source formats share: their version, their counts and their batching.

Each loader (:mod:`~indexing.corpora.esci`, :mod:`~indexing.corpora.enron`) streams Arrow tables for
:func:`indexing.corpora.files.write_corpus`, which publishes a corpus only when every row is written. A
broken record stops the load with a :class:`~indexing.errors.CorpusError` naming the file and line (or the
message path), so a failed load leaves the previous corpus as it was.

What a loader finds out while it streams, :class:`LoadStats` holds: how many source records it read,
how many it kept, dropped (by reason; copies of a record already loaded are *deduplicated*, reasons
starting ``duplicate_``) and derived, plus the columns the corpus schema lacks (``extras``: one row per
loaded document, keyed by ``id``). :func:`~indexing.corpora.files.write_corpus` writes the counts into
the corpus's load report and the extras beside the parts; neither is indexed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from indexing.errors import CorpusError

LOADER_VERSION = "3"
DUPLICATE = "duplicate_"
"""Prefix of the drop reasons that are copies of a record already loaded (deduplicated, not lost)."""


@dataclass
class LoadStats:
    """Filled while a loader streams: records read, rows kept, rows dropped by reason, notes on derived
    values, and the extra columns of the rows kept (set once the last row is out)."""

    read: int = 0
    """Source records read (message files, products of the locale); ``read == rows + sum(dropped)``."""
    rows: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    derived: Counter[str] = field(default_factory=Counter)
    extras: pa.Table | None = None
    """Columns the corpus schema lacks, one row per loaded document in id order, with ``id`` first."""

    def as_report(self) -> dict[str, Any]:
        """The counts, for the load report: deduplicated copies apart from records dropped for a fault."""
        return {
            "read": self.read,
            "loaded": self.rows,
            "dropped": {k: v for k, v in sorted(self.dropped.items()) if not k.startswith(DUPLICATE)},
            "deduplicated": {k: v for k, v in sorted(self.dropped.items()) if k.startswith(DUPLICATE)},
            "derived": dict(sorted(self.derived.items())),
        }


def check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise CorpusError(f"limit must be a positive integer, got {limit!r}", code="bad_argument")


def row_tables(rows: Iterator[dict[str, Any]], schema: pa.Schema, chunk_rows: int) -> Iterator[pa.Table]:
    buf: list[dict[str, Any]] = []
    for row in rows:
        buf.append(row)
        if len(buf) >= chunk_rows:
            yield pa.Table.from_pylist(buf, schema=schema)
            buf = []
    if buf:
        yield pa.Table.from_pylist(buf, schema=schema)
