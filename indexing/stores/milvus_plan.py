"""How rows are loaded into a Milvus server's collection: when it is indexed, loaded and compacted.

A Milvus 2.3 server indexes a collection segment by segment: a growing segment is sealed (by Milvus'
default at 23% of the 512 MB segment size, about 60k rows of a product collection; the local server of
:mod:`indexing.stores.server` at 85%, about 217k) or flushed, and the index node then builds its HNSW graph,
one segment at a time. What the client does decides how often each row is indexed:

* An *upsert* is a delete plus an insert. Every row then has a delete record, and compaction rewrites
  each indexed segment to apply them, which the index node indexes a second time.
* *Automatic compaction* also merges small indexed segments (under half the segment size) into larger
  ones, which are indexed again. Milvus compacts only indexed segments.
* A *loaded* collection is searchable while rows arrive: the query node consumes every growing segment
  and builds a temporary index for it.

:class:`LoadPlan` names these choices. :data:`INTERACTIVE` (Milvus' defaults: indexed and loaded from the
start) suits a caller that searches what it just wrote; :data:`BULK_LOAD`, the index build's, inserts into
an unindexed, unloaded collection with automatic compaction held off, and :meth:`MilvusStore.flush
<indexing.stores.milvus.MilvusStore.flush>` then creates the index, waits for it and loads: each row is
indexed once. ``bench/milvus_load.py`` measures the plans side by side (the README's "Scaling" numbers:
half the index builds, and no re-indexing after the build returns). Milvus Lite ignores plans.

>>> BULK_LOAD.insert, BULK_LOAD.index_first, BULK_LOAD.auto_compaction
(True, False, False)
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError

WRITE_BATCH = 1000
"""Rows per insert or upsert request: a few MB per gRPC message, far below its limit. Larger requests
gain nothing measurable (``bench/milvus_load.py``): pymilvus packs each value in Python either way."""
AUTO_COMPACTION = "collection.autocompaction.enabled"
"""The collection property (Milvus 2.3.5 and later) that holds off automatic compaction of one collection."""


@dataclass(frozen=True)
class LoadPlan:
    """How a server's collection is prepared for the rows written next, and how they are written.

    Milvus Lite ignores it: it indexes in-process, loaded from the start, and upserts.
    :data:`INTERACTIVE` (the default) makes rows searchable as soon as they are written;
    :data:`BULK_LOAD`, the index build's plan, indexes every row once, after the load. The other
    combinations are there to be measured side by side (``bench/milvus_load.py``).
    """

    insert: bool = False
    """Insert rows known to be new (:meth:`~indexing.stores.milvus.MilvusStore.write` with ``fresh``). ``False`` upserts them,
    which Milvus 2.3 runs as a delete plus an insert: a delete record per row, after which compaction
    rewrites every segment and the index node indexes it a second time."""
    index_first: bool = True
    """Create the vector index with the collection: each segment is indexed as soon as it is sealed, while
    rows still arrive. ``False``: :meth:`~indexing.stores.milvus.MilvusStore.flush` creates it once the rows are written."""
    load_first: bool = True
    """Load the collection into the query node at once, so rows are searchable while they arrive (it then
    also consumes every growing segment). ``False``: :meth:`~indexing.stores.milvus.MilvusStore.flush` loads it. Milvus 2.3 loads
    only indexed collections, so this needs ``index_first``."""
    auto_compaction: bool = True
    """Milvus' automatic compaction of the collection (:data:`AUTO_COMPACTION`). It merges small indexed
    segments and rewrites those with deletes, and the index node then indexes the result again. Held off, a
    collection written once keeps the segments it was sealed into: many small ones cost searches (1.5x at
    11 segments per collection against 3-4), unless segments are sealed large
    (:data:`~indexing.stores.server.SEAL_PROPORTION`)."""
    rows_per_request: int = WRITE_BATCH
    """Rows per insert or upsert request."""

    def __post_init__(self) -> None:
        if self.load_first and not self.index_first:
            raise ConfigError(
                "a Milvus 2.3 server loads only indexed collections: load_first needs index_first"
            )
        if self.rows_per_request < 1:
            raise ConfigError(f"rows_per_request must be at least 1, got {self.rows_per_request}")


INTERACTIVE = LoadPlan()
"""Indexed, loaded and compacted as Milvus does by default: what a caller gets that searches while it writes."""
BULK_LOAD = LoadPlan(insert=True, index_first=False, load_first=False, auto_compaction=False)
"""The index build's plan on a server: insert, then flush, create the index, wait for it, load. Each row
is indexed once; see :meth:`~indexing.stores.milvus.MilvusStore.flush` and the README's index build numbers."""


@dataclass(frozen=True)
class FlushTimes:
    """Seconds :meth:`~indexing.stores.milvus.MilvusStore.flush` spent per step."""

    persist_s: float = 0.0
    """Sealing and writing the buffered rows."""
    index_s: float = 0.0
    """Creating a missing index and waiting until it covers every row."""
    load_s: float = 0.0
    """Loading collections not loaded yet into the query node."""
