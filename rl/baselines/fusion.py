"""Retrieval-only baselines: BM25, dense, and their reciprocal-rank fusion.

Each one treats the whole request as one query and ignores its structure (no filters, no logic).

* ``bm25`` (the paper's B1): BM25 on every text field of the corpus, one ranking per field, fused
  with RRF (constant 60). Per-field indexes are what the store keeps; fusing them rewards a
  document that matches in several fields without letting one long field's term statistics
  dominate, as a single concatenated field would.
* ``dense``: the same with the text embedder (MiniLM on CPU) and Milvus, fused across text fields.
* ``rrf``: RRF of the ``bm25`` and ``dense`` rankings.

Only text fields are searched: the image field stands in for a picture, which a text retriever
cannot read. Fusion uses :func:`serving.engine.ranking.rrf_fuse`, the engine's own RRF.
"""

from __future__ import annotations

from collections.abc import Sequence

from indexing.stores.base import Hit
from rl.eval.methods import EvalInstance, MethodContext, Outcome, register_method
from serving.engine.ranking import rrf_fuse
from serving.self_query import FIELD_DEPTH_FACTOR, fuse_fields
from serving.self_query import dense_rankings as fused_dense


def _depth(k: int) -> int:
    return FIELD_DEPTH_FACTOR * k


def bm25_rankings(
    ctx: MethodContext, queries: Sequence[str], k: int, *, depth: int | None = None
) -> list[list[Hit]]:
    """BM25 on every text field (top ``depth``, default ``2 * k``), fused per query, top ``k``."""
    index = ctx.index
    per_field = [index.sparse_search(f, list(queries), depth or _depth(k)) for f in ctx.schema.text_fields]
    return fuse_fields(per_field, k)


def dense_rankings(
    ctx: MethodContext, queries: Sequence[str], k: int, *, filter: str | None = None, depth: int | None = None
) -> list[list[Hit]]:
    """Dense search on every text field (top ``depth``, default ``2 * k``), fused per query, top ``k``
    (:func:`serving.self_query.dense_rankings`); ``filter`` is a Milvus boolean expression applied inside each search."""
    return fused_dense(ctx.index, ctx.schema, queries, k, filter=filter, depth=depth)


def _ids(rankings: Sequence[Sequence[Hit]]) -> list[Outcome]:
    return [Outcome.ranked([doc for doc, _ in hits]) for hits in rankings]


@register_method("bm25", description="BM25 on each text field, fused with RRF (paper B1)")
def bm25(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    return _ids(bm25_rankings(ctx, [i.nl for i in instances], k))


@register_method("dense", description="dense MiniLM search on each text field, fused with RRF")
def dense(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    return _ids(dense_rankings(ctx, [i.nl for i in instances], k))


@register_method("rrf", description="reciprocal-rank fusion of the bm25 and dense rankings")
def rrf(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    queries = [i.nl for i in instances]
    # Each side's fused top 2k at the same per-field depth as when it runs alone.
    lexical = bm25_rankings(ctx, queries, _depth(k), depth=_depth(k))
    semantic = dense_rankings(ctx, queries, _depth(k), depth=_depth(k))
    return _ids([rrf_fuse([a, b], k) for a, b in zip(lexical, semantic, strict=True)])
