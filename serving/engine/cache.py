"""The engine's caches are the project's one bounded cache, :class:`indexing.cache.LRU` (re-exported).

GRPO rollouts repeat phrases and whole programs, so most lookups in a training run are hits.
The engine is bound to one published index version, which never changes in place, so a cached
value stays correct for the engine's lifetime.
"""

from indexing.cache import LRU, CacheStats

__all__ = ["LRU", "CacheStats"]
