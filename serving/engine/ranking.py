"""The ranking contract: how a program's result set becomes a ranked list (DESIGN.md section 3).

This module is the one place the contract lives; the engine, the reward and the evaluation import it.

* When the program's SQL has ``ORDER BY``, the SQL's row order wins: the engine keeps the rows in
  the order ClickHouse returned them (first occurrence of each id) and cuts to ``k``.
* Otherwise each result id scores the sum, over the program's *positive* placeholders (those under
  ``id IN``, never ``id NOT IN``), of ``1 / (RRF_K + rank)``, where ``rank`` counts from 1 in that
  entry's candidate list. An id in no positive list scores 0. Ids are ordered by score, highest
  first, ties broken by id ascending; so with no positive placeholder the order is by id.

Sums use :func:`math.fsum` (exactly rounded), so two ids whose rank terms are equal as a multiset get
bit-identical scores and the tie really falls to the id.

>>> ranked = rank_results(["P3", "P1", "P2"], [["P2", "P3"], ["P3"]], sql_ordered=False, k=3)
>>> ranked.ids
('P3', 'P2', 'P1')
>>> rank_results(["P3", "P1", "P2"], [["P2"]], sql_ordered=True, k=2).ids
('P3', 'P1')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from indexing.stores.base import Hit
from serving.dsl.limits import DEFAULT_LIMITS

RRF_K: int = DEFAULT_LIMITS.rrf_constant
"""The RRF constant of the ranking contract and of ``fuse`` (defined once, in the DSL limits)."""


def rrf_term(rank: int) -> float:
    """The contribution of one list in which an id sits at ``rank`` (counting from 1)."""
    return 1.0 / (RRF_K + rank)


def rank_positions(ids: Sequence[str]) -> dict[str, int]:
    """Rank (from 1) of each id in a ranked list; a repeated id keeps its best rank."""
    out: dict[str, int] = {}
    for i, doc in enumerate(ids, start=1):
        out.setdefault(doc, i)
    return out


def contract_scores(ids: Iterable[str], positive_lists: Sequence[Sequence[str]]) -> dict[str, float]:
    """The contract score of each id in ``ids`` given the ranked lists of the positive placeholders."""
    positions = [rank_positions(lst) for lst in positive_lists]
    scores: dict[str, float] = {}
    for doc in ids:
        if doc not in scores:
            scores[doc] = math.fsum(rrf_term(pos[doc]) for pos in positions if doc in pos)
    return scores


@dataclass(frozen=True)
class Ranked:
    """Ranked ids (at most ``k``) and their contract scores, aligned."""

    ids: tuple[str, ...]
    scores: tuple[float, ...]


def rank_results(
    result_ids: Sequence[str],
    positive_lists: Sequence[Sequence[str]],
    *,
    sql_ordered: bool,
    k: int,
) -> Ranked:
    """Apply the ranking contract to the ids the SQL returned (in the SQL's row order)."""
    unique = list(dict.fromkeys(result_ids))
    scores = contract_scores(unique, positive_lists)
    if not sql_ordered:
        unique.sort(key=lambda doc: (-scores[doc], doc))
    top = unique[: max(k, 0)]
    return Ranked(tuple(top), tuple(scores[doc] for doc in top))


def rrf_fuse(lists: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
    """Reciprocal-rank fusion of ranked hit lists (the ``fuse`` mode), top ``k``, ties by id.

    >>> rrf_fuse([[("a", 0.9), ("b", 0.8)], [("b", 7.0), ("c", 5.0)]], 2)[0][0]
    'b'
    """
    scores = contract_scores(
        (doc for lst in lists for doc, _ in lst),
        [[doc for doc, _ in lst] for lst in lists],
    )
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ordered[: max(k, 0)]
