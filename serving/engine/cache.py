"""A small bounded LRU map; the engine keeps its embedding, retrieval and program caches in these.

GRPO rollouts repeat phrases and whole programs, so most lookups in a training run are hits.
The engine is bound to one published index version, which never changes in place, so a cached
value stays correct for the engine's lifetime.

>>> c: LRU[str, int] = LRU(2)
>>> c.put("a", 1); c.put("b", 2); _ = c.get("a"); c.put("c", 3)
>>> sorted(c.keys()), c.hits, c.misses
(['a', 'c'], 1, 0)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """Least-recently-used map holding at most ``capacity`` entries (0 disables caching)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        """The cached value (and mark it recently used), or ``None``."""
        try:
            value = self._data[key]
        except KeyError:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        if self.capacity == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()
        self.hits = 0
        self.misses = 0

    def keys(self) -> Iterator[K]:
        return iter(list(self._data))

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
