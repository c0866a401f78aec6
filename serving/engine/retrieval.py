"""Resolve a batch of retrieval requests into ranked id lists, with as few store calls as possible.

Every request of a batch is deduplicated; distinct query phrases are embedded in one call per
embedder; each field gets one Milvus search (and one BM25 search) per width of the ladder in use,
per pushed filter and per candidate set, for the whole batch.

**Pushed filters.** A request may carry a Milvus ``filter`` (:mod:`serving.engine.pushdown`): its
dense search then ranks only the documents that pass it. Only dense searches take it (``dense``, and
the dense half of ``fuse``); BM25 runs in process over the whole field and is never filtered, so a
``sparse`` request ignores its filter and a ``fuse`` request fuses a filtered dense list with an
unfiltered BM25 one. The filter is part of every cache key (requests and raw searches). Should a
store refuse a filter (it never should: the translation writes only what Milvus Lite and the Milvus
server both accept, and the tests hold it to that), that search runs again without it, which is the
unpushed meaning, and ``calls["filter_refused"]`` counts it.

**Candidates.** A request may also carry ``within``, the ids it is searched among (conditional
evaluation, :mod:`serving.engine.conditional`). Every kind of search takes it. BM25 scores only those
documents, in process (:meth:`indexing.stores.bm25.Bm25Index.search`). A dense search asks the store,
with ``id in [...]`` (:func:`~serving.engine.pushdown.id_filter`, written from the ids a store returned,
never from a program) and-ed to its pushed filter: one store search per candidate set, since a batch's
conditioned searches all differ in their candidates. With ``serving.planning.candidates_in_process``, a
dense search among candidates *without* a pushed filter is scored in process instead: the candidates'
stored vectors are fetched once per field for the whole batch (one store call per :data:`FETCH_CHUNK` ids
not in the vector cache) and scored by the store's own metric (:func:`~indexing.stores.base.similarity`),
every candidate, so the cut is exact and a tie at it is settled by id without a band search. Over a few
hundred candidates that is the same ranking as the store's filtered search (Milvus searches so selective a
filter by brute force) up to float32 rounding, which :data:`SCORE_DECIMALS` absorbs (tested on both
deployments, under IP, COSINE and L2). The ids are part of every cache key. A refused pushed filter is
dropped, never the candidates; an empty ``within`` answers nothing without a store call.

A request's result must not depend on which other requests share its batch, or a reward computed in
a batch would differ from the same program run alone. Two things could make it depend:

* batched and single dot products round differently (matrix-matrix vs matrix-vector kernels), so
  nearly equal scores can swap. Hits are therefore ordered by score rounded to
  :data:`SCORE_DECIMALS`, then by id;
* the width of the search decides which of several tied documents make the cut. Each request is
  therefore searched at its own width plus :data:`WIDTH_MARGIN` (never a width borrowed from a
  neighbour), then cut to its ``k`` after the stable ordering above. A tie that runs past the margin
  is settled by id over its whole band of equal scores (:mod:`serving.engine.ties`), so the cut is the
  ranking contract's and not the index's (``serving.planning.exact_ties``).

**Searches at once.** A batch's store searches are independent of each other: with
``serving.engine.search_threads`` above 1, up to that many run at once on the retriever's threads, each
waiting on the store while the next is sent. Each search and its cut are the same as one at a time, so the
answers and the calls are too.

Calls from several threads may overlap: the caches are :class:`core.cache.LRU` (locked), the
counters take a small lock, and the stores serialize what they must themselves (chDB's process-wide
query lock, each BM25 index's lock; Milvus clients are thread-safe). Embedding is the exception: a
model is shared by every embedder of its name in the process, and sentence-transformers' fast
tokenizer fails with "Already borrowed" when two threads use it at once, so each embedder name has one
process-wide lock (:func:`embed_lock`) held for the length of one ``embed`` call.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.cache import LRU, CacheStats
from indexing.embedders.base import Embedder
from indexing.embedders.cache import CachedEmbedder
from indexing.errors import StoreError, StoreUnavailable
from indexing.index import IndexHandle
from indexing.stores.base import Hit, Vectors, similarity
from serving.engine.pushdown import conjoin, id_at_most, id_filter
from serving.engine.ranking import rrf_fuse
from serving.engine.rerank import CosineReranker, Reranker, RerankRequest, enforce_subset
from serving.engine.ties import needs_settling, settle
from serving.settings import CacheSizes

__all__ = ["CacheSizes", "RetrievalRequest", "Retriever", "search_width"]

WIDTH_MARGIN = 5
"""Extra hits fetched beyond a request's ``k`` so near-ties at the cut are ordered by id, not by chance."""

SCORE_DECIMALS = 5
"""Scores are compared at this precision when ordering hits (see the module docstring)."""

SCORE_TOLERANCE = 10.0**-SCORE_DECIMALS
"""Two scores closer than this are the same score to the engine (one unit of :data:`SCORE_DECIMALS`)."""

FETCH_CHUNK = 4096
"""Most ids of one store call fetching stored vectors."""


def search_width(k: int) -> int:
    """How many hits a request of width ``k`` fetches from a store."""
    return k + WIDTH_MARGIN


DENSE, SPARSE, FUSE = "dense", "sparse", "fuse"

Within = tuple[str, ...] | None
"""The sorted ids a search is restricted to, or None for the whole field."""

RawKey = tuple[str, str, str, int, str | None, Within]
"""(field, dense|sparse, query, width, filter, within): one store search (sparse searches have no filter)."""

Group = tuple[str, int, str | None, Within]
"""(field, width, filter, within): the searches of a batch that one store call answers."""

DenseSearch = tuple[Group, list[str], Vectors]
"""One store call of a batch: its group, its query phrases and their vectors (one row each)."""

_EMBED_LOCKS: dict[str, threading.Lock] = {}
_EMBED_LOCKS_GUARD = threading.Lock()


def embed_lock(name: str) -> threading.Lock:
    """The process-wide lock held around one ``embed`` call of any embedder named ``name``."""
    with _EMBED_LOCKS_GUARD:
        return _EMBED_LOCKS.setdefault(name, threading.Lock())


def _embed(emb: Embedder, texts: Sequence[str]) -> Vectors:
    with embed_lock(emb.name):
        return np.asarray(emb.embed(texts), dtype=np.float32)


@dataclass(frozen=True)
class RetrievalRequest:
    """One semantic request: the key under which its result is deduplicated and cached."""

    field: str
    mode: str
    query: str
    k: int
    rerank: int
    filter: str | None = None
    """A Milvus boolean expression its dense search is restricted to (pushed down), or None."""
    within: Within = None
    """The ids (sorted, as a store returned them) its searches rank, dense and BM25 alike (conditional
    evaluation, :mod:`serving.engine.conditional`), or None for every document of the field."""


def _by_score(hits: Iterable[Hit]) -> tuple[Hit, ...]:
    # Stores order near-equal scores by chance; rounded scores and then ids make every cut stable.
    pairs = ((str(d), float(s)) for d, s in hits)
    return tuple(sorted(pairs, key=lambda h: (-round(h[1], SCORE_DECIMALS), h[0])))


class Retriever:
    """Runs retrieval requests against one index, through three caches."""

    def __init__(
        self,
        handle: IndexHandle,
        *,
        reranker: Reranker | None,
        sizes: CacheSizes,
        exact_ties: bool = True,
        in_process: bool = False,
        search_threads: int = 1,
    ) -> None:
        self._handle = handle
        self._threads = search_threads
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._exact_ties = exact_ties
        self._in_process = in_process
        self._calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()
        self._searches: LRU[RawKey, tuple[Hit, ...]] = LRU(sizes.searches)
        self._requests: LRU[RetrievalRequest, tuple[Hit, ...]] = LRU(sizes.requests)
        self._vectors: LRU[tuple[str, str], Vectors] = LRU(sizes.vectors)
        self.reranker: Reranker = reranker or CosineReranker(self.encode, self.doc_vectors)

    @property
    def calls(self) -> Counter[str]:
        """Store calls made so far, by kind: ``embed``, ``ann``, ``band`` (a range search settling a tie at a
        cut), ``sparse``, ``fetch_vectors`` and ``filter_refused`` (a filtered search the store refused, run
        again unfiltered); dense searches among candidates scored in process, ``scored_within`` (no store
        call of their own); and ties at a cut settled by id, ``ties_settled`` (the whole band read) and
        ``ties_unsettled`` (part of it) (a copy)."""
        with self._calls_lock:
            return Counter(self._calls)

    def _count(self, kind: str) -> None:
        with self._calls_lock:
            self._calls[kind] += 1

    def caches(self) -> dict[str, CacheStats]:
        """Stats of the retrieval caches and of the embedders' caches (``embeddings:<name>``)."""
        out = {
            "searches": self._searches.stats(),
            "requests": self._requests.stats(),
            "vectors": self._vectors.stats(),
        }
        for emb in self._cached_embedders():
            out[f"embeddings:{emb.name}"] = emb.stats()
        return out

    def clear(self) -> None:
        """Forget every cached result and the embedders' cached vectors (a cold start)."""
        self._searches.clear()
        self._requests.clear()
        self._vectors.clear()
        for emb in self._cached_embedders():
            emb.clear()

    def cache_stats(self) -> dict[str, dict[str, int]]:
        caches: dict[str, LRU[Any, Any]] = {
            "searches": self._searches,
            "requests": self._requests,
            "vectors": self._vectors,
        }
        stats = {
            n: {"size": len(c), "maxsize": c.maxsize, "hits": c.hits, "misses": c.misses}
            for n, c in caches.items()
        }
        for emb in self._cached_embedders():
            stats[f"embeddings:{emb.name}"] = {
                "size": len(emb),
                "maxsize": emb.maxsize,
                "hits": emb.hits,
                "misses": emb.misses,
            }
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
                self._count("embed")
                rows = _embed(emb, texts)
                out.update({(name, text): row for text, row in zip(texts, rows, strict=True)})
        return out

    def stored_vectors(self, field: str, ids: Iterable[str]) -> dict[str, Vectors]:
        """Stored vectors of ``ids`` on ``field``, through the vector cache: the ids not cached are fetched
        in calls of at most :data:`FETCH_CHUNK`. Documents without a stored vector are absent."""
        found: dict[str, Vectors] = {}
        missing: list[str] = []
        for doc in dict.fromkeys(ids):
            vector = self._vectors.get((field, doc))
            if vector is None:
                missing.append(doc)
            else:
                found[doc] = vector
        for start in range(0, len(missing), FETCH_CHUNK):
            self._count("fetch_vectors")
            chunk = missing[start : start + FETCH_CHUNK]
            fetched = self._handle.vectors.fetch_vectors(self._handle.collection, field, chunk)
            for doc, vector in fetched.items():
                self._vectors.put((field, doc), vector)
            found.update(fetched)
        return found

    def doc_vectors(self, field: str, ids: Sequence[str]) -> Mapping[str, Vectors]:
        """Stored vectors of ``ids`` on ``field``; documents without one get their text embedded."""
        found = self.stored_vectors(field, ids)
        missing = [doc for doc in ids if doc not in found]
        if missing:
            docs = self._handle.fetch_docs(missing, ["id", field])
            texts = [str(d[field]) for d in docs]
            rows = _embed(self._handle.embedder(field), texts)
            found.update({str(d["id"]): row for d, row in zip(docs, rows, strict=True)})
        return found

    # -- requests -----------------------------------------------------------------------------

    def resolve(
        self,
        requests: Iterable[RetrievalRequest],
        timings: dict[str, float],
        costs: dict[RetrievalRequest, dict[str, float]] | None = None,
    ) -> dict[RetrievalRequest, tuple[Hit, ...]]:
        """The ranked hits of every request, with stage times added into ``timings`` (ms).

        With ``costs``, each request that did work gets its share of each stage (ms): a stage's time
        split equally among the requests that needed its work in this call (``embed`` and ``ann``: the
        requests with a dense search not cached; ``sparse``: those with a BM25 search not cached;
        ``rerank``: the reranked ones). A request answered from the cache costs nothing.
        """
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
        stage_ms: dict[str, float] = {}
        raw, needs = self._raw_searches(todo, stage_ms)
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
            stage_ms["rerank"] = (time.perf_counter() - start) * 1000
            needs["rerank"] = [req for req, _ in rerank]
        for req in todo:
            self._requests.put(req, out[req])
        for stage, ms in stage_ms.items():
            timings[stage] = timings.get(stage, 0.0) + ms
            owners = needs.get(stage) or todo
            if costs is not None:
                for req in owners:
                    share = costs.setdefault(req, {})
                    share[stage] = share.get(stage, 0.0) + ms / len(owners)
        return out

    @staticmethod
    def _recall(req: RetrievalRequest, raw: Mapping[RawKey, tuple[Hit, ...]]) -> tuple[Hit, ...]:
        if req.mode == SPARSE:
            return raw[_raw_key(req, SPARSE)][: req.k]
        dense = raw[_raw_key(req, DENSE)][: req.k]
        if req.mode == DENSE:
            return dense
        sparse = raw[_raw_key(req, SPARSE)][: req.k]
        return tuple(rrf_fuse([dense, sparse], req.k))

    def _raw_searches(
        self, todo: Sequence[RetrievalRequest], timings: dict[str, float]
    ) -> tuple[dict[RawKey, tuple[Hit, ...]], dict[str, list[RetrievalRequest]]]:
        """The raw searches of ``todo`` and, per stage, the requests that needed a search not cached."""
        raw: dict[RawKey, tuple[Hit, ...]] = {}
        fresh: set[RawKey] = set()
        # group -> phrases to search, per kind
        dense: dict[Group, dict[str, None]] = {}
        sparse: dict[Group, dict[str, None]] = {}
        for req in todo:
            kinds = {DENSE: (DENSE,), SPARSE: (SPARSE,)}.get(req.mode, (DENSE, SPARSE))
            for kind in kinds:
                key = _raw_key(req, kind)
                if key in raw:
                    continue
                cached = self._searches.get(key)
                if cached is not None:
                    raw[key] = cached
                elif not _searchable(key):
                    raw[key] = ()
                elif key not in fresh:
                    fresh.add(key)
                    group = (key[0], key[3], key[4], key[5])
                    (dense if kind == DENSE else sparse).setdefault(group, {})[req.query] = None
        if dense:
            start = time.perf_counter()
            by_field: dict[str, list[str]] = {}
            for (fld, _, _, _), queries in dense.items():
                by_field.setdefault(fld, []).extend(queries)
            encoded = self.encode_many(by_field)
            mid = time.perf_counter()
            local = {g for g in dense if self._in_process and _in_process(g)}
            stored = self._candidates(local)
            searches: list[DenseSearch] = []
            for group, queries in dense.items():
                fld, width, expr, within = group
                name = self._handle.embedder(fld).name
                vectors = np.stack([encoded[(name, q)] for q in queries])
                if within is not None and group in local:
                    ranked = self._score_among(stored.get(fld, {}), vectors, within, width)
                    for q, top in zip(queries, ranked, strict=True):
                        raw[(fld, DENSE, q, width, expr, within)] = top
                else:
                    searches.append((group, list(queries), vectors))
            # Independent store searches, up to search_threads at a time; their results in order.
            for (group, words, _), ranked in zip(searches, self._map(self._searched, searches), strict=True):
                fld, width, expr, within = group
                for q, top in zip(words, ranked, strict=True):
                    raw[(fld, DENSE, q, width, expr, within)] = top
            end = time.perf_counter()
            timings["embed"] = timings.get("embed", 0.0) + (mid - start) * 1000
            timings["ann"] = timings.get("ann", 0.0) + (end - mid) * 1000
        if sparse:
            start = time.perf_counter()
            for (fld, width, _, within), queries in sparse.items():
                self._count("sparse")
                results = self._handle.sparse_search(fld, list(queries), width, within=within)
                for q, hits in zip(queries, results, strict=True):
                    # A zero BM25 score means no query term matched: not a lexical hit.
                    raw[(fld, SPARSE, q, width, None, within)] = _by_score(h for h in hits if h[1] > 0)
            timings["sparse"] = timings.get("sparse", 0.0) + (time.perf_counter() - start) * 1000
        for key in fresh:
            self._searches.put(key, raw[key])
        needs: dict[str, list[RetrievalRequest]] = {}
        for req in todo:
            if req.mode != SPARSE and _raw_key(req, DENSE) in fresh:
                needs.setdefault("embed", []).append(req)
                needs.setdefault("ann", []).append(req)
            if req.mode != DENSE and _raw_key(req, SPARSE) in fresh:
                needs.setdefault("sparse", []).append(req)
        return raw, needs

    def _searched(self, job: DenseSearch) -> list[tuple[Hit, ...]]:
        """One store search of a group's query ``vectors`` (:meth:`_dense`), each list cut (:meth:`_cut`)."""
        (fld, width, expr, within), _, vectors = job
        results, used = self._dense(fld, vectors, width, expr, within)
        return [
            self._cut(fld, v, _by_score(hits), width, used) for v, hits in zip(vectors, results, strict=True)
        ]

    def _map(
        self, fn: Callable[[DenseSearch], list[tuple[Hit, ...]]], jobs: Sequence[DenseSearch]
    ) -> list[list[tuple[Hit, ...]]]:
        """``fn`` over ``jobs``, up to ``search_threads`` at a time (in order; the first error is raised)."""
        if self._threads <= 1 or len(jobs) <= 1:
            return [fn(job) for job in jobs]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="engine-search")
            pool = self._pool
        return list(pool.map(fn, jobs))

    def close(self) -> None:
        """Stop the search threads (a later call starts them again)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _candidates(self, groups: Iterable[Group]) -> dict[str, dict[str, Vectors]]:
        """The stored vectors of every candidate of the dense searches ``groups`` (keyed as in
        :meth:`_raw_searches`, all among candidates and without a pushed filter), by field: one fetch of
        their union per field."""
        by_field: dict[str, dict[str, None]] = {}
        for fld, _, _, within in groups:
            by_field.setdefault(fld, {}).update(dict.fromkeys(within or ()))
        return {fld: self.stored_vectors(fld, ids) for fld, ids in by_field.items()}

    def _score_among(
        self, stored: Mapping[str, Vectors], vectors: Vectors, within: Sequence[str], width: int
    ) -> list[tuple[Hit, ...]]:
        """The top ``width`` of ``within`` for each query vector, every candidate scored in process by the
        store's metric and ordered as a store's hits are (module docstring, "Candidates")."""
        ids = [doc for doc in within if doc in stored]
        self._count("scored_within")
        if not ids:
            return [() for _ in vectors]
        scores = similarity(self._handle.vectors.metric, vectors, np.stack([stored[doc] for doc in ids]))
        return [_by_score(zip(ids, row.tolist(), strict=True))[:width] for row in scores]

    def _dense(
        self, fld: str, vectors: Vectors, width: int, expr: str | None, within: Within
    ) -> tuple[list[list[Hit]], str | None]:
        """One Milvus search of ``vectors`` on ``fld`` among ``within``, and the filter it ran with; a refused
        pushed filter is dropped (module docstring), the candidates never are."""
        self._count("ann")
        store = self._handle.vectors
        candidates = None if within is None else id_filter(within)
        pushed = conjoin(expr, candidates)
        try:
            return store.search(self._handle.collection, fld, vectors, width, filter=pushed), pushed
        except StoreUnavailable:
            raise
        except StoreError:
            if expr is None:
                raise
        self._count("filter_refused")
        self._count("ann")
        return store.search(self._handle.collection, fld, vectors, width, filter=candidates), candidates

    def _cut(
        self, fld: str, vector: Vectors, hits: tuple[Hit, ...], width: int, used: str | None
    ) -> tuple[Hit, ...]:
        """``hits`` of one dense search that ran with the filter ``used``, with a tie at its cut settled by id
        over the band the same filter selects (:mod:`serving.engine.ties`)."""
        k = width - WIDTH_MARGIN
        if not self._exact_ties or not needs_settling(hits, k, width, SCORE_DECIMALS):
            return hits
        store = self._handle.vectors

        def band(low: float, high: float, limit: int, bound: str | None) -> list[Hit]:
            self._count("band")
            where = conjoin(used, None if bound is None else id_at_most(bound))
            return store.search_band(self._handle.collection, fld, vector, low, high, limit, filter=where)

        settled = settle(hits, k, width, SCORE_DECIMALS, band)
        self._count("ties_settled" if settled.exact else "ties_unsettled")
        return _by_score(settled.hits)


def _raw_key(req: RetrievalRequest, kind: str) -> RawKey:
    """The store search behind one half of ``req``: BM25 searches carry no filter (but do take ``within``)."""
    filtered = req.filter if kind == DENSE else None
    return (req.field, kind, req.query, search_width(req.k), filtered, req.within)


def _in_process(group: Group) -> bool:
    """Whether the dense searches of ``group`` (field, width, pushed filter, candidates) are scored in
    process: searches among candidates without a pushed filter (module docstring, "Candidates")."""
    return group[3] is not None and group[2] is None


def _searchable(key: RawKey) -> bool:
    """False for a search among no candidate, or (dense) among none that Milvus can be asked for
    (:func:`~serving.engine.pushdown.id_filter`): its answer is empty without a store call."""
    within = key[5]
    if within is None:
        return True
    return bool(within) and (key[1] == SPARSE or id_filter(within) is not None)
