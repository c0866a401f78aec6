"""What the engine returns and the limits it runs programs under."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import ProReError
from indexing.stores.clickhouse import QueryLimits
from serving.dsl.program import Retrieval, placeholder_name
from serving.engine.ranking import rrf_term

STAGES: tuple[str, ...] = ("validate", "embed", "ann", "sparse", "rerank", "sql", "rank", "total")
"""Stages reported in :attr:`ExecutionResult.timings`, in pipeline order."""


class ExecutionError(ProReError):
    """A valid program failed while running: a limit was hit or ClickHouse rejected it.

    Codes: ``exec_timeout`` (``max_execution_time``), ``exec_limit`` (rows read, result rows or
    memory) and ``exec_failed`` (anything else ClickHouse refused because of the statement, e.g. a
    type mismatch, under any error code: one the store does not classify is the program's when the
    program fails alone and the store answers a good statement). A failure that is not the program's
    raises a retryable :class:`~indexing.errors.StoreFailure` for the whole call instead.
    """

    code = "exec_failed"


class DeadlineExceeded(ProReError):
    """The request's deadline passed before this program finished; no fault of the program's.

    Retryable: the same program with more time left may well succeed. Programs of a batch that
    finished before the deadline keep their results.
    """

    code = "deadline_exceeded"
    retryable = True


ExecutionLimits = QueryLimits
"""Limits every program's SQL runs under: the stores' :class:`~indexing.stores.clickhouse.QueryLimits`,
whose defaults are :class:`~indexing.config.ClickHouseConfig`'s (one definition of the read-only caps)."""


def candidate_name(index: int, entry: Retrieval) -> str:
    """The key of entry ``index``'s (0-based) list in :attr:`ExecutionResult.candidates`: its placeholder,
    :meth:`~serving.dsl.Program.placeholder` without the angle brackets (``text_1`` for ``<text_1>``)."""
    return placeholder_name(entry.type, index)


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one program.

    ``ids`` are ranked by the ranking contract (:mod:`serving.engine.ranking`), at most ``k``;
    ``scores`` are their contract scores. ``candidates`` maps each placeholder name (``text_1``,
    ``image_2``) to the ranked ids its entry retrieved. ``sql`` is the SQL that ran, with the id sets
    substituted: as string literals, or (``serving.sql.ids: bound``) as query parameters named after the
    placeholders, ``id IN {text_1: Array(String)}``, bound to ``candidates["text_1"]``. ``timings`` gives milliseconds per stage (:data:`STAGES`), this program's own:

    * ``validate``: its own validation and planning (a cache hit costs a lookup);
    * ``embed``, ``ann``, ``sparse``, ``rerank``: work shared by a batch, attributed by request. Each
      stage's time in the call is split equally among the distinct retrieval requests that needed that
      stage's work (a dense search not cached: ``embed`` and ``ann``; a BM25 search not cached:
      ``sparse``; a rerank: ``rerank``), and a request's share is split equally among the programs of
      the batch that hold it. A request answered from the engine's caches costs nothing;
    * ``sql``: its own substitution, plus its share of every ClickHouse call that carried its statement
      (a call's time split equally among the distinct statements in it, failed attempts of a split
      batch included; identical statements in a batch share one slot; a cached SQL result costs
      nothing);
    * ``rank``: its own ranking;
    * ``total``: the sum of the stages above.

    So the programs' stages of one call sum to that call's stage times (less the bookkeeping between
    stages), and a program run alone gets the whole of each.
    Only a program that validated and ran within its limits has a result; a failing one yields its
    typed error instead.
    """

    ids: tuple[str, ...]
    scores: tuple[float, ...]
    candidates: Mapping[str, tuple[str, ...]]
    sql: str
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Measurements, not part of the answer: two results are equal when their answers are."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "ids": list(self.ids),
            "scores": list(self.scores),
            "candidates": {name: list(ids) for name, ids in self.candidates.items()},
            "sql": self.sql,
            "timings": {stage: round(ms, 3) for stage, ms in self.timings.items()},
        }


def fuse(
    rankings: Sequence[Sequence[str] | None], weights: Sequence[float], k: int
) -> list[tuple[str, float]]:
    """Weighted reciprocal-rank fusion of result rankings, top ``k`` with their fused scores: each id scores
    ``sum(weight / (RRF_K + rank))`` over the rankings that hold it (the ranking contract's RRF term,
    :func:`serving.engine.ranking.rrf_term`); a tie goes to the id seen first, reading the rankings in order.
    A ranking that is None (its program failed) or empty adds nothing. The query API's fusion of the
    planner's programs with the self-querying retriever, and the evaluation's ``&fuse=`` option.

    >>> fuse([["a", "b"], None, ["b", "c"]], [1.0, 1.0, 1.0], 2)
    [('b', 0.03252247488101534), ('a', 0.01639344262295082)]
    >>> [doc for doc, _ in fuse([["a", "b"], ["c"]], [1.0, 2.0], 3)]
    ['c', 'a', 'b']
    """
    if len(rankings) != len(weights):
        raise ValueError(f"{len(rankings)} rankings for {len(weights)} weights")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, doc in enumerate(ranking or (), 1):
            scores[doc] = scores.get(doc, 0.0) + weight * rrf_term(rank)
    return sorted(scores.items(), key=lambda item: -item[1])[: max(k, 0)]


def unanimous(rankings: Sequence[Sequence[str] | None]) -> bool:
    """Whether every ranking is there, ranks something, and is the same as the others: the planner's programs
    all agreeing, which the fusion gate ``unanimous`` trusts alone (``serving.api.fuse_gate``).

    >>> unanimous([["a", "b"], ["a", "b"]]), unanimous([["a"], ["b"]]), unanimous([["a"], None]), unanimous([[]])
    (True, False, False, False)
    """
    first = tuple(rankings[0] or ()) if rankings else ()
    return bool(first) and all(r is not None and tuple(r) == first for r in rankings)


def consensus(rankings: Sequence[Sequence[str] | None]) -> int | None:
    """The index of the ranking most of ``rankings`` agree on, among those that rank something (a tie
    goes to the earliest), or None when none does: self-consistency by execution result, the pick of
    execution-guided decoding over sampled programs.

    >>> consensus([None, ["b"], ["a"], ["a"]]), consensus([["b"], ["a"]]), consensus([None, []])
    (2, 0, None)
    """
    counts = Counter(tuple(r) for r in rankings if r)
    if not counts:
        return None
    best = max(counts.values())
    return next(i for i, r in enumerate(rankings) if r and counts[tuple(r)] == best)
