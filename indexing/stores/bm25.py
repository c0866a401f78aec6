"""BM25 over one text field with bm25s, English stop words and Snowball (PyStemmer) stemming.

An index directory holds bm25s' own files plus ``ids.json``, the document id of each row, so hits
are document ids, never row numbers.

A search may be restricted to given documents (``within``): bm25s scores every document and multiplies
the scores by a 0/1 mask of those rows (its ``weight_mask``), so each candidate keeps the score it has in
an unrestricted search and the top-k is taken among the candidates only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.cache import LRU, CacheStats
from core.errors import require
from indexing.errors import StoreError
from indexing.publish import staged
from indexing.stores.base import Hit

IDS_FILE = "ids.json"
STOPWORDS = "en"
STEMMER_LANGUAGE = "english"


def new_stemmer() -> Any:
    """A PyStemmer stemmer of its own: PyStemmer objects are not safe to share between threads."""
    stemmer_mod: Any = require("Stemmer", "bm25")
    return stemmer_mod.Stemmer(STEMMER_LANGUAGE)


def _bm25s() -> Any:
    return require("bm25s", "bm25")


class Bm25Index:
    """A BM25 index of one field; build it with :meth:`build`, persist with :meth:`save`."""

    def __init__(self, ids: Sequence[str], retriever: Any) -> None:
        self.ids = list(ids)
        self._retriever = retriever
        # Each index has its own stemmer, used only under its lock: PyStemmer is not thread-safe,
        # and bm25s' retriever keeps per-call state.
        self._stemmer = new_stemmer()
        self._lock = threading.Lock()
        self._row_of: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, ids: Sequence[str], texts: Sequence[str]) -> Bm25Index:
        """Index ``texts``; ``ids[i]`` is the document id of ``texts[i]``."""
        if len(ids) != len(texts):
            raise StoreError(f"{len(ids)} ids for {len(texts)} texts")
        bm25s = _bm25s()
        # A stemmer of this build's own, so that builds in several threads share nothing.
        tokens = bm25s.tokenize(list(texts), stopwords=STOPWORDS, stemmer=new_stemmer(), show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(ids, retriever)

    def search(
        self, queries: Sequence[str], k: int, *, within: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` ``(id, score)`` per query, best first; documents sharing no term are left out.

        With ``within``, only those documents are ranked (ids the index does not hold are ignored).
        """
        if not queries:
            return []
        mask = None
        n = min(k, len(self.ids))
        if within is not None:
            rows = self._rows(within)
            n = min(k, len(rows))
            mask = np.zeros(len(self.ids), dtype=np.float32)
            mask[rows] = 1.0
        if n <= 0:
            return [[] for _ in queries]
        bm25s = _bm25s()
        with self._lock:
            # Strings (not ids) so that the index's own vocabulary maps the query terms.
            tokens = bm25s.tokenize(
                list(queries),
                stopwords=STOPWORDS,
                stemmer=self._stemmer,
                return_ids=False,
                show_progress=False,
            )
            docs, scores = self._retriever.retrieve(
                tokens, k=n, show_progress=False, n_threads=1, weight_mask=mask
            )
        out: list[list[Hit]] = []
        for row_docs, row_scores in zip(docs, scores, strict=True):
            out.append(
                [(self.ids[int(d)], float(s)) for d, s in zip(row_docs, row_scores, strict=True) if s > 0]
            )
        return out

    def _rows(self, ids: Collection[str]) -> list[int]:
        """Row numbers of the known ``ids`` (the id-to-row map is built on first use)."""
        with self._lock:
            if self._row_of is None:
                self._row_of = {doc: row for row, doc in enumerate(self.ids)}
            row_of = self._row_of
        return sorted({row_of[doc] for doc in ids if doc in row_of})

    def save(self, directory: Path) -> None:
        """Write the index to ``directory`` (replaced whole: written aside, then renamed into place).

        Indexes are written into a version that is not published yet, so no reader sees the swap.
        """
        with staged(Path(directory), replace=True) as tmp:
            self._retriever.save(str(tmp), show_progress=False)
            (tmp / IDS_FILE).write_text(json.dumps(self.ids))

    @classmethod
    def load(cls, directory: Path) -> Bm25Index:
        """Read an index written by :meth:`save`."""
        directory = Path(directory)
        ids_path = directory / IDS_FILE
        if not ids_path.is_file():
            raise StoreError(f"no BM25 index in {directory}", code="no_index")
        retriever = _bm25s().BM25.load(str(directory), show_progress=False, verbosity=0)
        return cls(json.loads(ids_path.read_text()), retriever)


LOADED_MAX = 32
"""BM25 indexes kept loaded per process (a few fields of a few versions of each corpus)."""

_LOADED: LRU[str, Bm25Index] = LRU(LOADED_MAX)
_LOAD_LOCK = threading.Lock()


def load_cached(directory: Path) -> Bm25Index:
    """:meth:`Bm25Index.load`, kept in a bounded per-process cache (published versions never change).

    A caller that keeps using an index (an index handle) holds on to the object it got; an index
    pushed out of the cache stays valid for its holders and is loaded again by the next caller.
    """
    key = str(Path(directory).resolve())
    found = _LOADED.get(key)
    if found is None:
        with _LOAD_LOCK:  # one load per directory, not one per thread that missed at once
            found = _LOADED.peek(key)
            if found is None:
                found = Bm25Index.load(Path(key))
                _LOADED.put(key, found)
    return found


def forget(directory: Path) -> None:
    """Drop a cached index (its directory is being deleted)."""
    _LOADED.pop(str(Path(directory).resolve()))


def forget_all() -> None:
    """Drop every cached index."""
    _LOADED.clear()


def loaded_stats() -> CacheStats:
    """Hits, misses and size of the per-process cache of loaded indexes."""
    return _LOADED.stats()
