"""An in-process LRU of embeddings in front of any embedder (the project's one cache, :class:`core.cache.LRU`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.cache import LRU, CacheStats
from indexing.embedders.base import Embedder, Vectors, empty


class CachedEmbedder:
    """Wraps ``inner``; keys are ``(inner.name, text)``. Misses of one call are encoded in one batch.

    ``hits`` and ``misses`` count texts (a text repeated within one call is encoded once and
    counted as one miss plus hits for its repeats). Safe to call from several threads; two threads
    missing the same text at once may both encode it.
    """

    def __init__(self, inner: Embedder, maxsize: int = 200_000) -> None:
        self.inner = inner
        self.name = inner.name
        self._lru: LRU[tuple[str, str], Vectors] = LRU(maxsize)

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def maxsize(self) -> int:
        return self._lru.maxsize

    @property
    def hits(self) -> int:
        return self._lru.hits

    @property
    def misses(self) -> int:
        return self._lru.misses

    def stats(self) -> CacheStats:
        return self._lru.stats()

    def __len__(self) -> int:
        return len(self._lru)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Rows for ``texts``: cached ones copied, the rest encoded by ``inner`` in one call."""
        if len(texts) == 0:
            return empty(self.dim)
        found: dict[str, Vectors] = {}
        missing: list[str] = []
        for text in dict.fromkeys(texts):
            row = self._lru.get((self.name, text))
            if row is None:
                missing.append(text)
            else:
                found[text] = row
        repeats = len(texts) - len(found) - len(missing)
        self._lru.count(hits=repeats)
        if missing:
            fresh = self.inner.embed(missing)
            for text, row in zip(missing, fresh, strict=True):
                found[text] = row
                self._lru.put((self.name, text), row)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        self._lru.clear()
