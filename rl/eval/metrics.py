"""Ranking metrics for one relevant document per query (the benchmark's gold id).

The ranking is what a method returned, best first; ties were already broken by the engine's
ranking contract, so position is all that counts. Every metric looks only at the top ``cutoff``
ids (the run's ``k``, default 20, the paper's K): a gold id below the cut-off scores 0, as a gold
id that is absent does. A query whose method failed (no ranking) scores 0 everywhere and counts
against the execution success rate.

>>> ranking = ["P3", "P7", "P1"]
>>> hit_at(ranking, "P7", 1), hit_at(ranking, "P7", 3), reciprocal_rank(ranking, "P7")
(0.0, 1.0, 0.5)
>>> round(ndcg_at(ranking, "P7", 3), 4)
0.6309
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CUTOFF = 20
"""Depth at which rankings are cut before scoring: the paper's K (top-20 candidates)."""

METRICS: tuple[str, ...] = ("hit@1", "hit@3", "mrr", "ndcg@3", "exec")
"""Metric names in report order; ``hit@1`` is the primary metric."""

METRIC_LABELS: dict[str, str] = {
    "hit@1": "Hit@1",
    "hit@3": "Hit@3",
    "mrr": "MRR",
    "ndcg@3": "NDCG@3",
    "exec": "Exec",
}


def rank_of(ranking: Sequence[str], gold: str, cutoff: int = DEFAULT_CUTOFF) -> int | None:
    """1-based rank of ``gold`` within the top ``cutoff`` of ``ranking``; ``None`` when it is not there."""
    for position, doc_id in enumerate(ranking[:cutoff], start=1):
        if doc_id == gold:
            return position
    return None


def hit_at(ranking: Sequence[str], gold: str, k: int) -> float:
    """1.0 when ``gold`` is among the first ``k`` ids, else 0.0."""
    return 1.0 if rank_of(ranking, gold, k) is not None else 0.0


def reciprocal_rank(ranking: Sequence[str], gold: str, cutoff: int = DEFAULT_CUTOFF) -> float:
    """1/rank of ``gold`` within the top ``cutoff``; 0.0 when absent or deeper (MRR@cutoff per query)."""
    rank = rank_of(ranking, gold, cutoff)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at(ranking: Sequence[str], gold: str, k: int) -> float:
    """NDCG@k with one relevant document: the ideal DCG is 1, so it is 1/log2(rank + 1) or 0."""
    rank = rank_of(ranking, gold, k)
    return 0.0 if rank is None else 1.0 / math.log2(rank + 1)


@dataclass(frozen=True)
class QueryScores:
    """Every metric of one query; ``executed`` is False when the method gave no ranking."""

    rank: int | None
    hit1: float
    hit3: float
    mrr: float
    ndcg3: float
    executed: bool

    def as_dict(self) -> dict[str, float]:
        """Metric name -> value, keyed as in :data:`METRICS`."""
        return {
            "hit@1": self.hit1,
            "hit@3": self.hit3,
            "mrr": self.mrr,
            "ndcg@3": self.ndcg3,
            "exec": 1.0 if self.executed else 0.0,
        }


def score_query(ranking: Sequence[str] | None, gold: str, cutoff: int = DEFAULT_CUTOFF) -> QueryScores:
    """All metrics of one query. ``ranking=None`` means the method failed on it.

    >>> score_query(None, "E1").as_dict()["exec"]
    0.0
    >>> score_query(["E2", "E1"], "E1", cutoff=1).mrr
    0.0
    """
    if ranking is None:
        return QueryScores(rank=None, hit1=0.0, hit3=0.0, mrr=0.0, ndcg3=0.0, executed=False)
    top = list(ranking[:cutoff])
    return QueryScores(
        rank=rank_of(top, gold, cutoff),
        hit1=hit_at(top, gold, 1),
        hit3=hit_at(top, gold, 3),
        mrr=reciprocal_rank(top, gold, cutoff),
        ndcg3=ndcg_at(top, gold, 3),
        executed=True,
    )


def execution_success_rate(rankings: Sequence[Sequence[str] | None]) -> float:
    """Share of queries for which the method returned a ranking (possibly empty); 0.0 for no queries."""
    if not rankings:
        return 0.0
    return sum(r is not None for r in rankings) / len(rankings)
