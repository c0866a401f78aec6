"""Resolve a batch of retrieval requests into ranked id lists, with as few store calls as possible.

Every request of a batch is deduplicated; distinct query phrases are embedded in one call per
embedder; each field gets one Milvus search and one BM25 search for the whole batch. Searches run
at the widest width of the ladder and are cut per request, so a request's result never depends on
which other requests share its batch, and the cut lists can be cached across calls.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexing.embedders.base import Embedder
from indexing.embedders.cache import CachedEmbedder
from indexing.index import IndexHandle
from indexing.stores.base import Hit, Vectors
from serving.dsl.limits import DEFAULT_LIMITS
from serving.engine.cache import LRU
from serving.engine.ranking import rrf_fuse
from serving.engine.rerank import CosineReranker, Reranker, RerankRequest, enforce_subset

SEARCH_WIDTH: int = max(DEFAULT_LIMITS.k_ladder)
"""Every search runs this wide and is cut to each request's ``k``."""

DENSE, SPARSE, FUSE = "dense", "sparse", "fuse"


@dataclass(frozen=True)
class RetrievalRequest:
    """One semantic request: the key under which its result is deduplicated and cached."""

    field: str
    mode: str
    query: str
    k: int
    rerank: int


@dataclass(frozen=True)
class CacheSizes:
    """Entries kept by each of the engine's caches."""

    searches: int = 100_000
    """Raw search results at :data:`SEARCH_WIDTH`, keyed by (field, dense|sparse, query)."""
    requests: int = 100_000
    """Final candidate lists, keyed by the whole :class:`RetrievalRequest`."""
    programs: int = 50_000
    """Validated programs and their SQL results, keyed by the program text."""

    @classmethod
    def disabled(cls) -> CacheSizes:
        """No engine caching: every call searches and runs SQL again (embeddings stay with the embedders)."""
        return cls(0, 0, 0)


def _by_score(hits: Iterable[Hit]) -> tuple[Hit, ...]:
    # Stores may order equal scores arbitrarily; ids make the order, and so every cut, stable.
    return tuple(sorted(((str(d), float(s)) for d, s in hits), key=lambda h: (-h[1], h[0])))


class Retriever:
    """Runs retrieval requests against one index, through three caches."""

    def __init__(self, handle: IndexHandle, *, reranker: Reranker | None, sizes: CacheSizes) -> None:
        self._handle = handle
        self.calls: Counter[str] = Counter()
        """Store calls made so far, by kind: ``embed``, ``ann``, ``sparse``, ``fetch_vectors``."""
        self._searches: LRU[tuple[str, str, str], tuple[Hit, ...]] = LRU(sizes.searches)
        self._requests: LRU[RetrievalRequest, tuple[Hit, ...]] = LRU(sizes.requests)
        self.reranker: Reranker = reranker or CosineReranker(self.encode, self.doc_vectors)

    def clear(self) -> None:
        """Forget every cached result and the embedders' cached vectors (a cold start)."""
        self._searches.clear()
        self._requests.clear()
        for emb in self._cached_embedders():
            emb.clear()

    def cache_stats(self) -> dict[str, dict[str, int]]:
        caches: dict[str, LRU[Any, Any]] = {"searches": self._searches, "requests": self._requests}
        stats = {n: {"size": len(c), "hits": c.hits, "misses": c.misses} for n, c in caches.items()}
        for emb in self._cached_embedders():
            stats[f"embeddings:{emb.name}"] = {"size": len(emb), "hits": emb.hits, "misses": emb.misses}
        return stats

    def _cached_embedders(self) -> list[CachedEmbedder]:
        out: dict[int, CachedEmbedder] = {}
        for fld in self._handle.schema.vector_fields:
            emb: object = self._handle.embedder(fld)
            if isinstance(emb, CachedEmbedder):
                out[id(emb)] = emb
        return list(out.values())

    # -- embeddings ---------------------------------------------------------------------------

    def encode(self, field: str, queries: Sequence[str]) -> Vectors:
        """Query vectors of ``queries`` for ``field``'s embedder, one row each."""
        name = self._handle.embedder(field).name
        vectors = self.encode_many({field: queries})
        return np.stack([vectors[(name, q)] for q in queries])

    def encode_many(self, by_field: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], Vectors]:
        """Vectors keyed by (embedder, text): the distinct phrases of each embedder in one call.

        The index's embedders keep the process-wide embedding cache (``embedder.cache_size``), so a
        phrase seen before costs a lookup, not a forward pass.
        """
        todo: dict[str, tuple[Embedder, dict[str, None]]] = {}
        for fld, queries in by_field.items():
            emb = self._handle.embedder(fld)
            todo.setdefault(emb.name, (emb, {}))[1].update(dict.fromkeys(queries))
        out: dict[tuple[str, str], Vectors] = {}
        for name, (emb, pending) in todo.items():
            texts = list(pending)
            if texts:
                self.calls["embed"] += 1
                rows = np.asarray(emb.embed(texts), dtype=np.float32)
                out.update({(name, text): row for text, row in zip(texts, rows, strict=True)})
        return out

    def doc_vectors(self, field: str, ids: Sequence[str]) -> Mapping[str, Vectors]:
        """Stored vectors of ``ids`` on ``field``; documents without one get their text embedded."""
        self.calls["fetch_vectors"] += 1
        found: dict[str, Vectors] = dict(self._handle.vectors.fetch_vectors(self._handle.collection, field, ids))
        missing = [doc for doc in ids if doc not in found]
        if missing:
            docs = self._handle.fetch_docs(missing, ["id", field])
            texts = [str(d[field]) for d in docs]
            rows = np.asarray(self._handle.embedder(field).embed(texts), dtype=np.float32)
            found.update({str(d["id"]): row for d, row in zip(docs, rows, strict=True)})
        return found

    # -- requests -----------------------------------------------------------------------------

    def resolve(
        self, requests: Iterable[RetrievalRequest], timings: dict[str, float]
    ) -> dict[RetrievalRequest, tuple[Hit, ...]]:
        """The ranked hits of every request, with stage times added into ``timings`` (ms)."""
        out: dict[RetrievalRequest, tuple[Hit, ...]] = {}
        todo: list[RetrievalRequest] = []
        for req in dict.fromkeys(requests):
            hit = self._requests.get(req)
            if hit is None:
                todo.append(req)
            else:
                out[req] = hit
        if not todo:
            return out
        raw = self._raw_searches(todo, timings)
        rerank: list[tuple[RetrievalRequest, RerankRequest]] = []
        for req in todo:
            hits = self._recall(req, raw)
            if req.rerank > 0:
                rerank.append((req, RerankRequest(req.field, req.query, hits, min(req.rerank, req.k))))
            else:
                out[req] = hits
        if rerank:
            start = time.perf_counter()
            lists = self.reranker.rerank([r for _, r in rerank])
            for (req, rr), lst in zip(rerank, lists, strict=True):
                out[req] = tuple(enforce_subset(rr, lst))
            timings["rerank"] = timings.get("rerank", 0.0) + (time.perf_counter() - start) * 1000
        for req in todo:
            self._requests.put(req, out[req])
        return out

    @staticmethod
    def _recall(req: RetrievalRequest, raw: Mapping[tuple[str, str, str], tuple[Hit, ...]]) -> tuple[Hit, ...]:
        if req.mode == SPARSE:
            return raw[(req.field, SPARSE, req.query)][: req.k]
        dense = raw[(req.field, DENSE, req.query)][: req.k]
        if req.mode == DENSE:
            return dense
        sparse = raw[(req.field, SPARSE, req.query)][: req.k]
        return tuple(rrf_fuse([dense, sparse], req.k))

    def _raw_searches(
        self, todo: Sequence[RetrievalRequest], timings: dict[str, float]
    ) -> dict[tuple[str, str, str], tuple[Hit, ...]]:
        raw: dict[tuple[str, str, str], tuple[Hit, ...]] = {}
        dense: dict[str, dict[str, None]] = {}
        sparse: dict[str, dict[str, None]] = {}
        for req in todo:
            kinds = {DENSE: (DENSE,), SPARSE: (SPARSE,)}.get(req.mode, (DENSE, SPARSE))
            for kind in kinds:
                key = (req.field, kind, req.query)
                if key in raw:
                    continue
                cached = self._searches.get(key)
                if cached is not None:
                    raw[key] = cached
                else:
                    (dense if kind == DENSE else sparse).setdefault(req.field, {})[req.query] = None
        if dense:
            start = time.perf_counter()
            encoded = self.encode_many(dense)
            mid = time.perf_counter()
            for fld, queries in dense.items():
                name = self._handle.embedder(fld).name
                vectors = np.stack([encoded[(name, q)] for q in queries])
                self.calls["ann"] += 1
                results = self._handle.vectors.search(self._handle.collection, fld, vectors, SEARCH_WIDTH)
                for q, hits in zip(queries, results, strict=True):
                    raw[(fld, DENSE, q)] = _by_score(hits)
            end = time.perf_counter()
            timings["embed"] = timings.get("embed", 0.0) + (mid - start) * 1000
            timings["ann"] = timings.get("ann", 0.0) + (end - mid) * 1000
        if sparse:
            start = time.perf_counter()
            for fld, queries in sparse.items():
                self.calls["sparse"] += 1
                results = self._handle.sparse_search(fld, list(queries), SEARCH_WIDTH)
                for q, hits in zip(queries, results, strict=True):
                    # A zero BM25 score means no query term matched: not a lexical hit.
                    raw[(fld, SPARSE, q)] = _by_score(h for h in hits if h[1] > 0)
            timings["sparse"] = timings.get("sparse", 0.0) + (time.perf_counter() - start) * 1000
        for key, found in raw.items():
            self._searches.put(key, found)
        return raw
