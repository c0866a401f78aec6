"""Bounded adaptive K: pure functions that say how far a program's searches are widened, and when.

A program whose SQL returns fewer rows than asked for (:func:`rows_needed`) may have cut its
candidates too short: a positive placeholder's top-K held too few documents that pass the hard
conditions. Each round widens every positive entry (:attr:`~serving.dsl.ValidatedProgram.positive_entries`)
to its next width (:func:`widths`): the next rung of the DSL's K ladder, then doubling past its top
rung, never past ``adaptive_k_max``. Negative entries are never widened (a wider ``NOT IN`` set only
removes rows), nor reranked ones (their list is cut at the rerank depth, so a wider recall only
changes what the reranker chooses from). The rounds end when the rows suffice, when no entry can
widen, or after as many rounds as there are widths: so at most ``len(widths(...))`` extra rounds, and
the outcome depends only on the program, the call's ``k`` and the index, never on a batch.

>>> widths(20, (3, 5, 10, 20, 50), 200)
(50, 100, 200)
>>> widths(20, (3, 5, 10, 20, 50), 20)
()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlglot import exp

from serving.engine.retrieval import RetrievalRequest


def widths(k: int, ladder: Sequence[int], top: int) -> tuple[int, ...]:
    """The widths a request of width ``k`` is widened to, in order: rungs of ``ladder`` above ``k``,
    then doubling the top rung, up to ``top``."""
    out = [w for w in ladder if k < w <= top]
    width = ladder[-1]
    while width * 2 <= top:
        width *= 2
        if width > k:
            out.append(width)
    return tuple(out)


def widen(
    requests: Sequence[RetrievalRequest], positive: Sequence[int], ladder: Sequence[int], top: int
) -> tuple[RetrievalRequest, ...] | None:
    """``requests`` with each positive, unreranked entry at its next width; None when none can widen."""
    out = list(requests)
    changed = False
    for i in positive:
        req = out[i]
        if req.rerank > 0:
            continue
        nxt = widths(req.k, ladder, top)
        if nxt:
            out[i] = dataclasses.replace(req, k=nxt[0])
            changed = True
    return tuple(out) if changed else None


def rows_needed(tree: exp.Select, k: int) -> int:
    """Rows a program should return before it is widened: the call's ``k``, or the SQL's own
    ``LIMIT`` when that is smaller (a ``LIMIT 1`` program never needs a second row).

    >>> import sqlglot
    >>> rows_needed(sqlglot.parse_one("SELECT id FROM products WHERE price < 9 LIMIT 3", read="clickhouse"), 20)
    3
    """
    limit = tree.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit():
        return min(k, int(value.this))
    return k
