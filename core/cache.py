"""The one bounded cache of the project: ``cachetools.LRUCache`` behind a lock, with hit and miss counts.

Embeddings, BM25 indexes and the engine's program, SQL and retrieval caches all keep their entries
in an :class:`LRU`; :meth:`LRU.stats` is what a metrics exporter reads.

>>> c: LRU[str, int] = LRU(2)
>>> c.put("a", 1); c.put("b", 2); _ = c.get("a"); c.put("c", 3)
>>> sorted(c.keys()), c.hits, c.misses
(['a', 'c'], 1, 0)
>>> c.get("b") is None, c.stats()
(True, CacheStats(hits=1, misses=1, size=2, maxsize=2))
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import Cache, LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class CacheStats:
    """Counters of one cache: lookups that found an entry, lookups that did not, entries, bound."""

    hits: int
    misses: int
    size: int
    maxsize: int


class LRU(Generic[K, V]):
    """Least-recently-used map of at most ``maxsize`` entries (0 disables caching); safe across threads.

    ``get`` counts a hit or a miss; ``put`` never counts. ``clear`` forgets entries and counters.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = max(int(maxsize), 0)
        self._data: LRUCache[K, V] = LRUCache(maxsize=max(self.maxsize, 1))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        """The bound on entries (another name of ``maxsize``)."""
        return self.maxsize

    def get(self, key: K) -> V | None:
        """The cached value (marked recently used), or ``None``."""
        with self._lock:
            try:
                value = self._data[key]
            except KeyError:
                self.misses += 1
                return None
            self.hits += 1
            return value

    def peek(self, key: K) -> V | None:
        """The cached value without counting a lookup or changing the order, or ``None``."""
        with self._lock:
            if key not in self._data:
                return None
            # The base class's lookup: LRUCache's own would mark the entry recently used.
            value: V = Cache.__getitem__(self._data, key)
            return value

    def put(self, key: K, value: V) -> None:
        """Store ``value``; the least recently used entry goes when the cache is full."""
        if self.maxsize == 0:
            return
        with self._lock:
            self._data[key] = value

    def pop(self, key: K) -> V | None:
        """Remove ``key`` and return its value, or ``None`` if it was not cached."""
        with self._lock:
            return self._data.pop(key, None)

    def count(self, *, hits: int = 0, misses: int = 0) -> None:
        """Add lookups answered outside :meth:`get` (a text repeated within one embedding batch)."""
        with self._lock:
            self.hits += hits
            self.misses += misses

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        with self._lock:
            self._data.clear()
            self.hits = 0
            self.misses = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self.hits, self.misses, len(self._data), self.maxsize)

    def keys(self) -> Iterator[K]:
        """A snapshot of the keys."""
        with self._lock:
            return iter(list(self._data))

    def values(self) -> list[V]:
        """A snapshot of the values."""
        with self._lock:
            return list(self._data.values())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)
