"""Ranking metrics: against the one gold document, and against the instance's relevant set.

Two questions, two kinds of metric:

- **Found the gold** (the paper's metrics, :data:`METRICS`): Hit@1, Hit@3, MRR and NDCG@3 against
  the one document the gold program ranks first, and the execution rate. A method scores only when
  it reproduces the gold program's own ranking.
- **Satisfied the request** (:data:`GRADED`): P@1 (the primary one: the first result satisfies the
  whole request), Precision@5, nDCG@10 with binary gains and Recall@10 normalised by
  min(10, |relevant|), against every document that satisfies the request's condition tree (the
  instance's relevant set, :mod:`rl.datasets.relevance`). They need the corpus's label table: without
  one (real data) they are "n/a", never 0.

Both are computed by ``ir_measures`` over ``pytrec_eval`` (trec_eval), in bulk
(:func:`score_queries`): P@1 is Hit@1 with the gold as the only relevant document, Success@3 is
Hit@3, RR@cutoff is MRR and nDCG@3 is NDCG@3; Recall@10 is trec_eval's P@10 times 10 / min(10, |rel|).
The small hand-computed functions below (:func:`hit_at`, :func:`reciprocal_rank`, :func:`ndcg_at`)
are the reference the library is checked against.

The ranking is what a method returned, best first; ties were already broken by the engine's
ranking contract, so position is all that counts (each id gets a strictly decreasing score before
it reaches trec_eval, whose own tie-break would reorder). Every metric looks only at the top ``cutoff``
ids (the run's ``k``, default 20, the paper's K): a gold id below the cut-off scores 0, as a gold
id that is absent does; a repeated id counts at its first position (its repeats still take up places). A query whose method failed (no
ranking) scores 0 everywhere and counts against the execution success rate. An empty relevant set
scores 0 on every graded metric. A capped relevant set (more relevant documents than the stored ids)
counts a returned document outside the stored ids as not relevant, so its precision is a lower bound;
its recall and nDCG use the full size.

>>> ranking = ["P3", "P7", "P1"]
>>> hit_at(ranking, "P7", 1), hit_at(ranking, "P7", 3), reciprocal_rank(ranking, "P7")
(0.0, 1.0, 0.5)
>>> round(ndcg_at(ranking, "P7", 3), 4)
0.6309
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import require

DEFAULT_CUTOFF = 20
"""Depth at which rankings are cut before scoring: the paper's K (top-20 candidates)."""

METRICS: tuple[str, ...] = ("hit@1", "hit@3", "mrr", "ndcg@3", "exec")
"""Metric names in report order; ``hit@1`` is the primary metric."""

GRADED: tuple[str, ...] = ("p@1", "p@5", "ndcg@10", "recall@10")
"""Metrics against the relevant set, in report order; ``p@1`` is the primary one."""
ALL_METRICS: tuple[str, ...] = METRICS + GRADED

METRIC_LABELS: dict[str, str] = {
    "hit@1": "Hit@1",
    "hit@3": "Hit@3",
    "mrr": "MRR",
    "ndcg@3": "NDCG@3",
    "exec": "Exec",
    "p@1": "P@1",
    "p@5": "P@5",
    "ndcg@10": "nDCG@10",
    "recall@10": "R@10",
}

FOUND_VS_SATISFIED = (
    "Hit@1, Hit@3, MRR and NDCG@3 ask whether a method *found the gold*: the one document the gold "
    "program ranks first, so they reward reproducing that program's own ranking. P@1, P@5, nDCG@10 and "
    "R@10 ask whether it *satisfied the request*: every document that meets all of the request's "
    "conditions (by the corpus's facet labels) counts as relevant, so any right answer scores."
)
"""The two sentences every report prints under its table."""
GRADED_NA = (
    "n/a: this benchmark has no relevant sets, because its corpus has no label table "
    "(a corpus loaded from real data such as ESCI or Enron); they are not 0"
)
"""What a report says in place of the graded metrics of such a benchmark."""


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
class Relevant:
    """An instance's relevant set: ``ids`` (possibly capped) and the full size ``n``."""

    ids: tuple[str, ...]
    n: int

    @classmethod
    def of(cls, instance: Any) -> Relevant | None:
        """The relevant set a benchmark instance carries, or ``None`` when it has none (real data)."""
        n = getattr(instance, "relevant_n", None)
        if n is None:
            return None
        return cls(tuple(getattr(instance, "relevant_ids", ())), int(n))


@dataclass(frozen=True)
class QueryScores:
    """Every metric of one query; ``executed`` is False when the method gave no ranking.

    ``graded`` holds the metrics against the relevant set, or is ``None`` when the query has none.
    """

    rank: int | None
    hit1: float
    hit3: float
    mrr: float
    ndcg3: float
    executed: bool
    graded: Mapping[str, float] | None = None

    def as_dict(self) -> dict[str, float]:
        """Metric name -> value, keyed as in :data:`METRICS` (and :data:`GRADED` where there is a relevant set)."""
        out = {
            "hit@1": self.hit1,
            "hit@3": self.hit3,
            "mrr": self.mrr,
            "ndcg@3": self.ndcg3,
            "exec": 1.0 if self.executed else 0.0,
        }
        if self.graded is not None:
            out.update(self.graded)
        return out


def _measures(cutoff: int) -> dict[str, Any]:
    irm: Any = require("ir_measures", "eval")
    return {
        "hit@1": irm.P @ 1,
        "hit@3": irm.Success @ 3,
        "mrr": irm.RR @ cutoff,
        "ndcg@3": irm.nDCG @ 3,
        "p@1": irm.P @ 1,
        "p@5": irm.P @ 5,
        "ndcg@10": irm.nDCG @ 10,
        "p@10": irm.P @ 10,
    }


def _calc(
    measures: Sequence[Any], qrels: Mapping[str, Sequence[str]], run: Mapping[str, Sequence[str]]
) -> dict[tuple[str, str], float]:
    irm: Any = require("ir_measures", "eval")
    q = [irm.Qrel(qid, doc, 1) for qid, docs in qrels.items() for doc in docs]
    # Strictly decreasing scores keep the method's order: trec_eval would break ties by docno.
    r = [
        irm.ScoredDoc(qid, doc, float(len(ids) - pos))
        for qid, ids in run.items()
        for pos, doc in enumerate(ids)
    ]
    if not q or not r:
        return {}
    return {(m.query_id, str(m.measure)): float(m.value) for m in irm.iter_calc(list(measures), q, r)}


def _positions(ranking: Sequence[str]) -> list[str]:
    """The ranking with each repeat of an id replaced by a placeholder that is never relevant, so every
    id keeps the position of its first occurrence (trec_eval takes each document once)."""
    seen: set[str] = set()
    out = []
    for pos, doc in enumerate(ranking):
        out.append(doc if doc not in seen else f" repeat {pos}")
        seen.add(doc)
    return out


def score_queries(
    rankings: Sequence[Sequence[str] | None],
    golds: Sequence[str],
    relevant: Sequence[Relevant | None] | None = None,
    cutoff: int = DEFAULT_CUTOFF,
) -> list[QueryScores]:
    """Every metric of every query, computed by ``ir_measures`` (trec_eval) in two calls.

    ``rankings[i] is None`` means the method failed on query ``i``; ``relevant[i] is None`` that the
    query has no relevant set (its graded metrics are left out, not 0).

    >>> [s.as_dict()["p@1"] for s in score_queries([["P2", "P1"], ["P3"]], ["P1", "P3"], [Relevant(("P1", "P2"), 2), Relevant(("P3",), 1)])]
    [1.0, 1.0]
    """
    rels: list[Relevant | None] = list(relevant) if relevant is not None else [None] * len(golds)
    if not len(rankings) == len(golds) == len(rels):
        raise ValueError("rankings, golds and relevant sets must be equally long")
    tops: dict[str, list[str]] = {}
    for i, ranking in enumerate(rankings):
        if ranking:
            tops[str(i)] = _positions(ranking[:cutoff])
    ms = _measures(cutoff)
    gold_ms = [ms[m] for m in ("hit@1", "hit@3", "mrr", "ndcg@3")]
    graded_ms = [ms[m] for m in ("p@1", "p@5", "ndcg@10", "p@10")]
    gold_vals = _calc(gold_ms, {str(i): [g] for i, g in enumerate(golds)}, tops)
    graded_vals = _calc(
        graded_ms, {str(i): list(r.ids) for i, r in enumerate(rels) if r is not None and r.ids}, tops
    )
    out = []
    for i, ranking in enumerate(rankings):
        qid = str(i)

        def gv(name: str, vals: dict[tuple[str, str], float] = gold_vals, q: str = qid) -> float:
            return vals.get((q, str(ms[name])), 0.0)

        rel = rels[i]
        graded = None
        if rel is not None:
            graded = {
                "p@1": gv("p@1", graded_vals),
                "p@5": gv("p@5", graded_vals),
                "ndcg@10": gv("ndcg@10", graded_vals),
                "recall@10": gv("p@10", graded_vals) * 10 / min(10, rel.n) if rel.n else 0.0,
            }
        top = tops.get(qid, [])
        out.append(
            QueryScores(
                rank=rank_of(top, golds[i], cutoff) if ranking is not None else None,
                hit1=gv("hit@1"),
                hit3=gv("hit@3"),
                mrr=gv("mrr"),
                ndcg3=gv("ndcg@3"),
                executed=ranking is not None,
                graded=graded,
            )
        )
    return out


def score_query(
    ranking: Sequence[str] | None, gold: str, cutoff: int = DEFAULT_CUTOFF, relevant: Relevant | None = None
) -> QueryScores:
    """All metrics of one query (see :func:`score_queries`). ``ranking=None`` means the method failed on it.

    >>> score_query(None, "E1").as_dict()["exec"]
    0.0
    >>> score_query(["E2", "E1"], "E1", cutoff=1).mrr
    0.0
    """
    return score_queries([ranking], [gold], [relevant], cutoff)[0]


def execution_success_rate(rankings: Sequence[Sequence[str] | None]) -> float:
    """Share of queries for which the method returned a ranking (possibly empty); 0.0 for no queries."""
    if not rankings:
        return 0.0
    return sum(r is not None for r in rankings) / len(rankings)
