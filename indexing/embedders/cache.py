"""Caches in front of any embedder: an in-process LRU of single texts (the project's one in-memory cache,
:class:`core.cache.LRU`) for queries, and an on-disk store of the vectors of whole calls (``joblib.Memory``) for
index builds, so that building the same corpus again (on another store, with other index parameters, in another
workspace) embeds nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


class StoredEmbedder:
    """Wraps ``inner`` with an on-disk store of its vectors under ``location`` (``embedder.vector_cache``).

    An entry is one call: ``key`` (the settings that decide the vectors, :func:`indexing.embedders.registry.
    vector_key`) and the call's texts in order, hashed by joblib; its value is the rows ``inner`` returned, stored
    as ``.npy`` and read back bit for bit. An index build embeds chunk by chunk, so a build of the same corpus
    with the same chunk size finds every chunk. joblib writes each entry to a temporary name and renames it, so
    processes may share one location; two that miss the same entry at once both compute it. Nothing is ever
    evicted: remove the directory to reclaim its space. ``calls``, ``hits`` and ``misses`` count calls.
    """

    def __init__(self, inner: Embedder, location: str | Path, key: Mapping[str, Any]) -> None:
        import joblib  # the index build's dependency only; a query never reads this store

        self.inner = inner
        self.name = inner.name
        self.key = dict(key)
        self.calls = 0
        self.misses = 0
        self._stored = joblib.Memory(Path(location), verbose=0).cache(_vectors, ignore=["owner"])

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def hits(self) -> int:
        """Calls answered from the store."""
        return self.calls - self.misses

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Rows for ``texts``: the stored ones of an earlier identical call, else ``inner``'s, then stored."""
        if len(texts) == 0:
            return empty(self.dim)
        self.calls += 1
        rows: Vectors = self._stored(self, self.key, list(texts))  # joblib hashes the call once
        return rows


def _vectors(owner: StoredEmbedder, key: dict[str, Any], texts: list[str]) -> Vectors:
    """What :class:`StoredEmbedder` stores: its inner embedder's rows, under ``key`` and ``texts`` (``owner`` is
    not hashed). joblib runs it only on a miss, which ``owner`` counts."""
    del key  # part of the entry's name only
    owner.misses += 1
    return owner.inner.embed(texts)
