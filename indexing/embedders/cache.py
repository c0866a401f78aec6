"""An in-process LRU of embeddings in front of any embedder."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from indexing.embedders.base import Embedder, Vectors, empty


class CachedEmbedder:
    """Wraps ``inner``; keys are ``(inner.name, text)``. Misses of one call are encoded in one batch.

    ``hits`` and ``misses`` count texts (a text repeated within one call is encoded once and
    counted as one miss plus hits for its repeats).
    """

    def __init__(self, inner: Embedder, maxsize: int = 200_000) -> None:
        self.inner = inner
        self.name = inner.name
        self.maxsize = max(0, maxsize)
        self.hits = 0
        self.misses = 0
        self._lru: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __len__(self) -> int:
        return len(self._lru)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Rows for ``texts``: cached ones copied, the rest encoded by ``inner`` in one call."""
        if len(texts) == 0:
            return empty(self.dim)
        found: dict[str, Vectors] = {}
        missing: list[str] = []
        pending: set[str] = set()
        with self._lock:
            for text in texts:
                if text in found:
                    self.hits += 1
                    continue
                row = self._lru.get((self.name, text))
                if row is None:
                    if text not in pending:
                        pending.add(text)
                        missing.append(text)
                        self.misses += 1
                    else:
                        self.hits += 1
                    continue
                self._lru.move_to_end((self.name, text))
                found[text] = row
                self.hits += 1
        if missing:
            fresh = self.inner.embed(missing)
            with self._lock:
                for text, row in zip(missing, fresh, strict=True):
                    found[text] = row
                    self._put((self.name, text), row)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        with self._lock:
            self._lru.clear()
            self.hits = self.misses = 0

    def _put(self, key: tuple[str, str], row: Vectors) -> None:
        if self.maxsize == 0:
            return
        self._lru[key] = row
        self._lru.move_to_end(key)
        while len(self._lru) > self.maxsize:
            self._lru.popitem(last=False)
