"""Rerankers: re-score a recalled candidate list and keep its top ``top``.

A reranker only reorders or cuts; the engine enforces that (:func:`enforce_subset`) whatever the
reranker returns, so a plugged-in cross-encoder can never add a document to a candidate set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from indexing.stores.base import Hit, similarity

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True)
class RerankRequest:
    """Re-score ``hits`` (the recalled list of an entry on ``field``) for ``query``; keep ``top``."""

    field: str
    query: str
    hits: tuple[Hit, ...]
    top: int


class Reranker(Protocol):
    """Anything that re-scores candidate lists; a cluster can plug in a cross-encoder here."""

    name: str

    def rerank(self, requests: Sequence[RerankRequest]) -> list[list[Hit]]:
        """One re-scored list per request, best first (the engine cuts and checks it)."""


def enforce_subset(request: RerankRequest, reranked: Sequence[Hit]) -> list[Hit]:
    """Keep only recalled ids, each once, in the reranker's order, cut to ``request.top``."""
    recalled = {doc for doc, _ in request.hits}
    out: list[Hit] = []
    seen: set[str] = set()
    for doc, score in reranked:
        if doc in recalled and doc not in seen:
            seen.add(doc)
            out.append((doc, float(score)))
            if len(out) >= request.top:
                break
    return out


QueryEncoder = Callable[[str, Sequence[str]], Vectors]
"""``(field, queries) -> rows``: the query embedding of the field's embedder (through the cache)."""

DocVectors = Callable[[str, Sequence[str]], Mapping[str, Vectors]]
"""``(field, ids) -> {id: vector}``: the documents' vectors on that field."""


class CosineReranker:
    """The CPU default: score each recalled document by cosine between the query and the document's
    vector on the field (stored in Milvus, or the field text embedded by the field's embedder).

    For a ``dense`` entry this keeps the recall order and only cuts; for ``sparse`` and ``fuse``
    entries it reorders the lexical recall by meaning. The score is the cosine whatever the vectors' norms:

    >>> docs = {"near": np.array([0.5, 0.0], np.float32), "long": np.array([10.0, 10.0], np.float32)}
    >>> reranker = CosineReranker(lambda field, queries: np.array([[2.0, 0.0]], np.float32),
    ...                           lambda field, ids: {i: docs[i] for i in ids})
    >>> reranker.rerank([RerankRequest("title", "q", (("long", 0.9), ("near", 0.8)), top=2)])
    [[('near', 1.0), ('long', 0.707...)]]
    """

    name = "cosine"

    def __init__(self, encode_queries: QueryEncoder, doc_vectors: DocVectors) -> None:
        self._encode = encode_queries
        self._doc_vectors = doc_vectors

    def rerank(self, requests: Sequence[RerankRequest]) -> list[list[Hit]]:
        by_field: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            by_field.setdefault(req.field, []).append(i)
        out: list[list[Hit]] = [[] for _ in requests]
        for fld, idxs in by_field.items():
            queries = self._encode(fld, [requests[i].query for i in idxs])
            ids = sorted({doc for i in idxs for doc, _ in requests[i].hits})
            vectors = self._doc_vectors(fld, ids)
            for row, i in enumerate(idxs):
                req = requests[i]
                known = [doc for doc, _ in req.hits if doc in vectors]
                if not known:
                    continue
                # the cosine itself, not the dot product: a field's embedder need not write unit vectors
                sims = similarity(
                    "COSINE", queries[row : row + 1], np.stack([vectors[doc] for doc in known])
                )[0]
                scored = sorted(zip(known, sims.tolist(), strict=True), key=lambda h: (-h[1], h[0]))
                out[i] = scored[: req.top]
        return out
