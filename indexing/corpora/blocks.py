"""Deterministic blocks and re-chunking shared by the corpus generators.

A generator draws its random numbers per fixed-size *block* of documents, from a stream keyed by
``(generator, seed, block number)``. Document ``i`` therefore depends only on the seed and ``i``:
not on the corpus size, and not on how the output is chunked. :func:`rechunk` then cuts the block
tables into the caller's chunk size.

>>> id_width(3000), id_width(1_000_000)
(5, 7)
>>> doc_id("P", 42, 5)
'P00042'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from indexing.errors import CorpusError

BLOCK = 1024
"""Documents per random block. Changing it changes every generated corpus (bump the versions)."""
MAX_SIZE = 100_000_000


def id_width(size: int) -> int:
    """Digits in a document id: at least 5, enough for ``size``."""
    return max(5, len(str(size)))


def doc_id(prefix: str, index: int, width: int) -> str:
    """The id of document ``index`` (counting from 1), e.g. ``P00042``."""
    return f"{prefix}{index:0{width}d}"


def check_args(size: int, seed: int, chunk_rows: int) -> None:
    """Reject sizes, seeds and chunk sizes a generator cannot honour, with a typed error."""
    for name, value, low, high in (
        ("size", size, 1, MAX_SIZE),
        ("seed", seed, 0, 2**63 - 1),
        ("chunk_rows", chunk_rows, 1, 10_000_000),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
            raise CorpusError(
                f"{name} must be an integer in [{low}, {high}], got {value!r}", code="bad_argument"
            )


def block_rng(stream: int, seed: int, block: int) -> np.random.Generator:
    """The random generator of one block; ``stream`` keeps generators apart for the same seed."""
    return np.random.default_rng(np.random.SeedSequence([stream, seed, block]))


def block_ranges(size: int) -> Iterator[tuple[int, int, int]]:
    """``(block, first index, rows)`` for each block of a corpus of ``size`` documents (0-based)."""
    for block, start in enumerate(range(0, size, BLOCK)):
        yield block, start, min(BLOCK, size - start)


def generate_blocks(
    block: Callable[[int, int, int, int, int], pa.Table], size: int, seed: int, chunk_rows: int
) -> Iterator[pa.Table]:
    """A generated corpus of ``size`` documents, ``block(seed, block, start, rows, width)``'s tables re-cut into
    tables of ``chunk_rows`` rows (after :func:`check_args`); ``block`` makes one block of ids of ``width``
    digits from its own random stream (:func:`block_rng`)."""
    check_args(size, seed, chunk_rows)
    width = id_width(size)
    return rechunk((block(seed, b, start, rows, width) for b, start, rows in block_ranges(size)), chunk_rows)


def rechunk(tables: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """Re-cut a stream of tables into tables of exactly ``rows`` rows (the last may be shorter)."""
    buf: list[pa.Table] = []
    have = 0
    for table in tables:
        if table.num_rows == 0:
            continue
        buf.append(table)
        have += table.num_rows
        while have >= rows:
            joined = pa.concat_tables(buf)
            yield joined.slice(0, rows).combine_chunks()
            rest = joined.slice(rows)
            buf, have = ([rest] if rest.num_rows else []), rest.num_rows
    if have:
        yield pa.concat_tables(buf).combine_chunks()
