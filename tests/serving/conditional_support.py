"""What the conditional-evaluation tests share (``test_engine_conditional.py``, ``test_engine_chains.py``): the
engines they open on a small hashing index, the programs' first entries, and the check that a list is its entry's
own top-K among candidates, computed apart from the engine."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexing.config import Config
from serving.dsl import DslLimits, Program, Retrieval
from serving.engine import Engine, ExecutionResult
from serving.engine.retrieval import SCORE_TOLERANCE
from serving.settings import PlanningOptions

N = 300
WIDE = 400
"""A rung past the corpus: an entry of this width retrieves every document."""
LADDER = (3, 5, 10, 20, 50, WIDE)
"""Scores closer than this are ties to the engine (it orders hits by rounded score, then id)."""


def engine_of(cfg: Config, **planning: Any) -> Engine:
    return Engine.open(
        cfg,
        "ecommerce",
        dsl_limits=DslLimits(k_ladder=LADDER),
        planning=PlanningOptions(**{"pushdown": False, "conditional": False, **planning}),
    )


PAIR = "SELECT id FROM products WHERE id IN <A> AND id IN <B>"
"""Programs of two entries write ``<A>`` and ``<B>`` for their placeholders (named by the entries' types)."""


def pair(first: Retrieval, second: Retrieval, sql: str = PAIR) -> Program:
    sql = sql.replace("<A>", f"<{first.type}_1>").replace("<B>", f"<{second.type}_2>")
    return Program(sql, (first, second))


def lists(result: ExecutionResult) -> list[tuple[str, ...]]:
    """The candidate lists of a result, by entry."""
    return list(result.candidates.values())


def assert_top_k_among(
    engine: Engine, entry: Retrieval, candidates: Sequence[str], got: Sequence[str]
) -> None:
    """``got`` is ``entry``'s top-``k`` among ``candidates``, computed apart from the engine: dense scores
    from the vectors the store holds, BM25 scores from an unrestricted search of the whole field."""
    pool = set(candidates)
    if entry.mode == "dense":
        query = np.asarray(engine.handle.embedder(entry.field).embed([entry.query]))[0]
        stored = engine.handle.vectors.fetch_vectors(engine.handle.collection, entry.field, sorted(pool))
        scores = {doc: float(np.dot(vec, query)) for doc, vec in stored.items()}
    else:
        assert entry.mode == "sparse"
        hits = engine.handle.sparse_search(entry.field, [entry.query], N)[0]
        scores = {doc: s for doc, s in hits if doc in pool and s > 0}
    assert set(got) <= set(scores)
    assert len(got) == min(entry.k, len(scores))
    kept = [scores[d] for d in got]
    left = [s for d, s in scores.items() if d not in set(got)]
    assert not left or min(kept) >= max(left) - SCORE_TOLERANCE
    assert all(a >= b - SCORE_TOLERANCE for a, b in itertools.pairwise(kept))  # ranked by its own scores


HEAD = Retrieval("text", "title", "Sony headphones", k=10)
TAIL = Retrieval("image", "image", "glossy black speaker", k=3)
"""Independent, their top-K lists never meet (headphones, speakers); the second among the first's
candidates ranks the glossy black headphones first."""
