"""What the loaders of the real source formats share: their version, their counts and their batching.

Each loader (:mod:`~indexing.corpora.esci`, :mod:`~indexing.corpora.enron`) streams Arrow tables for
:func:`indexing.corpora.files.write_corpus`, which publishes a corpus only when every row is written. A
broken record stops the load with a :class:`~indexing.errors.CorpusError` naming the file and line (or the
message path), so a failed load leaves the previous corpus as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from indexing.errors import CorpusError

LOADER_VERSION = "2"


@dataclass
class LoadStats:
    """Filled while a loader streams: rows kept, rows dropped by reason, notes on derived values."""

    rows: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    derived: Counter[str] = field(default_factory=Counter)

    def as_meta(self) -> dict[str, Any]:
        return {"rows_loaded": self.rows, "dropped": dict(self.dropped), "derived": dict(self.derived)}


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
