"""Conditional evaluation of conjunctions: positive placeholders of one ``AND`` chain searched within each
other's candidates, so that ``id IN <a> AND id IN <b>`` means the same at any corpus size.

Filled with fixed top-K lists, ``id IN <a> AND id IN <b>`` is the intersection of two independent top-K
lists: it often holds documents at 3,000 documents and almost never at 1,000,000. With this pass the
engine searches such placeholders in sequence instead. The first entry of the *chain*
(:func:`conditional_chain`) is searched as it is today (with its pushed filter when pushdown is on); each
next one is searched only among the ids of the list before it (:func:`condition`): its top-K *among those
candidates* becomes its id set. So every list is a subset of the one before, the intersection is the last
list, non-empty whenever the first list is (and a later entry finds something among the candidates:
``sparse`` needs a shared term), and every list is still ranked by its own similarity, so the ranking
contract applies unchanged. A placeholder of the chain then means "the entry's top-K among the documents
that the chain's earlier entries kept".

Which entries form the chain, conservatively:

* An entry joins when its only use is ``id IN <p>`` that is a conjunct of the outer ``WHERE``
  (:func:`~serving.engine.climb.and_chained`: every node above it is an ``AND`` or parentheses, through
  plain self-subqueries only). There every row is in every chained list, so the earlier lists are guards
  of the later ones (as the structured conjuncts are for pushdown, :mod:`serving.engine.pushdown`):
  searching a later entry among the earlier one's candidates drops only documents that could not be
  rows, and reaches further down its ranking among those that can. Under ``OR`` a document can be a row
  through one list alone, and under ``NOT`` a list excludes; such a placeholder, or one below a subquery
  that cuts or groups, keeps today's meaning.
* An entry used by more than one placeholder does not join: one list would have to serve uses of
  different meaning.
* A reranked entry does not join, as adaptive K leaves it alone: its list is the reranker's choice among
  the recall, already the program's own explicit narrowing, and the chain would change what the reranker
  chooses from.
* Fewer than two such entries make no chain.
* The chain is in ``retrieval_list`` order (lowest index first). The order is the planner's to choose and
  stays visible in the program; no property of a request (mode, field, width) says which of two
  conjuncts is the better first search without measuring it.

**The tail.** A positive placeholder under ``OR`` (reached from the ``WHERE`` through ``AND``, ``OR`` and
parentheses only: ``id IN <a> AND (id IN <b> OR id IN <c>)``) is no guard of the rows, so it does not extend
the chain; but every row is still in every list of the chain, so searching it among the ids of the chain's
last list drops only documents that cannot be rows, exactly as for a chained entry. With
``serving.planning.conditional_disjuncts`` (on, under ``conditional``), such entries, each used once and
unreranked, form the chain's *tail*: each is searched among the last list's ids, after the chain, and the
chain may then be a single entry. Without it, ``id IN <a> AND (id IN <b> OR id IN <c>)`` intersects three
independent top-K lists, empty ever more often as the corpus grows. A placeholder under ``NOT`` is never
conditioned: restricted, it would exclude more than its K says.

**Chains within disjuncts.** A program without a chain of its outer ``WHERE`` may still conjoin searches inside
an ``OR``: ``(id IN <a> AND id IN <b>) OR (id IN <c> AND id IN <d>)`` intersects two pairs of independent
top-K lists, empty ever more often as the corpus grows. With ``serving.planning.conditional_branches``, the
positive placeholders that are conjuncts of one disjunct (:func:`~serving.engine.climb.disjunct_of`; each
used once, unreranked) form a chain of their own (:func:`branch_chains`), searched like the outer one, head
widened and all, on a corpus larger than ``chain_head_docs`` (at or below it nothing changes, as for the head):
every row that disjunct admits is in each of its lists, so searching one among the ids of
the one before drops only documents that the disjunct could not admit, and no other part of the condition
reads those lists. The other disjuncts are untouched, so the rows are still those of the fixed-K program
when K covers the corpus.

**A wider head.** The chain's first list is its entry's top-K over every document its pushed filter allows,
so as the corpus grows it is an ever smaller share of it and holds ever fewer documents that also satisfy the
next entries. On a corpus larger than ``serving.planning.chain_head_docs`` (5,000 by default), the head alone
is searched wider, at ``k × rows / chain_head_docs``, at most ``chain_head_max`` (:func:`widen_head`,
:meth:`~serving.settings.PlanningOptions.head_width`): the next entries then take their top-K among a wider
first list, and the rows are still at most the last list's. At or below that size the head is its entry's
top-K, like every other placeholder.

**A tapered chain.** With a wide head, a chain of three or more entries narrows to its second entry's K at the
second link, so the third entry is searched among only K candidates and keeps them all: its facet then orders
the rows (the ranking contract) but selects none of them. With ``serving.planning.chain_taper``, the links
between the head and the last entry are searched at widths that fall geometrically from the head's width to
the last entry's own K (:func:`taper_chain`): with a head of 400 and K = 20, three entries search 400, 89 and
20, so every entry's facet selects. The last entry keeps its K, so the rows are still at most its list's; where
the head is not widened (at or below ``chain_head_docs``) every width is the entry's own K and nothing changes.

How candidates reach the stores: a dense search (``dense``, and the dense half of ``fuse``) is given
``id in [...]`` and-ed with its pushed filter; BM25 (``sparse``, and the BM25 half of ``fuse``) scores
only the candidate documents in process. The ids come from the list a store returned, never from the
program (DESIGN.md section 6); see :mod:`serving.engine.retrieval`. A conditioned request carries its
candidates, so they are part of its cache keys, and its result depends on nothing else: a program gives
the same answer alone and in a batch. Adaptive K (:mod:`serving.engine.adaptive`) widens the chain's
entries like any positive entry, and the engine searches the chain again from its first entry at the new
widths.

>>> import sqlglot
>>> from serving.engine.retrieval import RetrievalRequest
>>> tree = sqlglot.parse_one(
...     "SELECT id FROM products WHERE price < 9 AND id IN text_3 AND id IN text_1 AND "
...     "(id IN text_2 OR brand = 'x')", read="clickhouse")
>>> requests = [RetrievalRequest("title", "dense", "q", 20, 0)] * 3
>>> conditional_chain(tree, "products", requests)
(0, 2)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from sqlglot import exp

from indexing.stores.base import Hit
from serving.dsl.placeholders import PlaceholderUse, placeholder_sites
from serving.engine.climb import and_chained, disjunct_of, or_reached
from serving.engine.retrieval import RetrievalRequest

__all__ = ["branch_chains", "condition", "conditional_chain", "conditional_plan", "taper_chain", "widen_head"]


def conditional_chain(tree: exp.Select, table: str, requests: Sequence[RetrievalRequest]) -> tuple[int, ...]:
    """The entries (0-based, in search order) searched within each other's candidates, or ``()``.

    ``tree`` is a planned program's tree (placeholders as sentinel columns) on the corpus table ``table``;
    ``requests`` are its entries' requests, by entry. Pure: the tree is not changed.
    """
    chain, _ = conditional_plan(tree, table, requests, disjuncts=False)
    return chain


def conditional_plan(
    tree: exp.Select, table: str, requests: Sequence[RetrievalRequest], *, disjuncts: bool = True
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(chain, tail)``: the chain (:func:`conditional_chain`), and with ``disjuncts`` the entries searched
    among the ids of the chain's last list because they are positive uses under ``OR`` (module docstring,
    "The tail"); ``((), ())`` when nothing is conditioned.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one(
    ...     "SELECT id FROM products WHERE id IN image_1 AND (id IN text_2 OR id IN text_3)", read="clickhouse")
    >>> requests = [RetrievalRequest("title", "dense", "q", 20, 0)] * 3
    >>> conditional_plan(tree, "products", requests), conditional_chain(tree, "products", requests)
    (((0,), (1, 2)), ())
    """
    free = _conditionable(tree, requests)
    members = sorted(use.entry for predicate, use in free if and_chained(predicate, table))
    tail = sorted(use.entry for predicate, use in free if disjuncts and or_reached(predicate, table))
    if not members or (len(members) < 2 and not tail):
        return (), ()
    return tuple(members), tuple(tail)


def branch_chains(
    tree: exp.Select, table: str, requests: Sequence[RetrievalRequest]
) -> tuple[tuple[int, ...], ...]:
    """The chains within disjuncts (module docstring, "Chains within disjuncts"): for each disjunct with two or
    more positive conjuncts that are placeholders used once and unreranked, their entries (0-based, in
    ``retrieval_list`` order), ordered by their first entry. For a program without an outer chain; pure.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one(
    ...     "SELECT id FROM products WHERE (id IN text_3 AND id IN text_1) OR (id IN text_2 AND price < 9 AND "
    ...     "id IN text_4 AND NOT id IN text_5) OR id IN text_6", read="clickhouse")
    >>> branch_chains(tree, "products", [RetrievalRequest("title", "dense", "q", 20, 0)] * 6)
    ((0, 2), (1, 3))
    """
    groups: dict[int, list[int]] = {}
    for predicate, use in _conditionable(tree, requests):
        disjunct = disjunct_of(predicate, table)
        if disjunct is not None:
            groups.setdefault(id(disjunct), []).append(use.entry)
    return tuple(sorted(tuple(sorted(g)) for g in groups.values() if len(g) >= 2))


def _conditionable(
    tree: exp.Select, requests: Sequence[RetrievalRequest]
) -> list[tuple[exp.In, PlaceholderUse]]:
    """The placeholder sites a chain may search among candidates: positive uses of entries used once and not
    reranked (module docstring, "Which entries form the chain")."""
    sites = placeholder_sites(tree)
    uses = Counter(use.entry for _, use in sites)
    return [(p, u) for p, u in sites if u.positive and uses[u.entry] == 1 and requests[u.entry].rerank == 0]


def condition(
    request: RetrievalRequest, among: RetrievalRequest, previous: Sequence[Hit]
) -> RetrievalRequest:
    """``request`` searched among the ids of ``previous``, the list of ``among`` (the chain's entry before
    it, as planned: its own pushed filter, before any conditioning).

    Every id of ``previous`` passed ``among``'s pushed filter, so the same filter on ``request`` selects
    nothing more among them: it is dropped, which leaves a dense search only its candidates (scored in
    process under ``serving.planning.candidates_in_process``; :mod:`serving.engine.retrieval`,
    "Candidates"). (Should a store have refused ``among``'s filter,
    which the translation is held never to provoke, its list holds the unpushed meaning, and so does this
    one.) A different filter stays.

    >>> head = RetrievalRequest("title", "dense", "q", 20, 0, filter="price < 9")
    >>> hits = [("b", 0.9), ("a", 0.8)]
    >>> same = condition(dataclasses.replace(head, query="r"), head, hits)
    >>> same.filter, same.within
    (None, ('a', 'b'))
    >>> condition(dataclasses.replace(head, filter="brand == 'x'"), head, hits).filter
    "brand == 'x'"
    """
    kept = None if request.filter == among.filter else request.filter
    return dataclasses.replace(request, filter=kept, within=tuple(sorted({doc for doc, _ in previous})))


def widen_head(requests: Sequence[RetrievalRequest], head: int, width: int) -> tuple[RetrievalRequest, ...]:
    """``requests`` with the chain's head (entry ``head``) searched at ``width`` when that is wider than its
    own ``k`` (module docstring, "A wider head"); the others unchanged.

    >>> reqs = [RetrievalRequest("title", "dense", "q", 20, 0), RetrievalRequest("review", "dense", "r", 20, 0)]
    >>> [r.k for r in widen_head(reqs, 0, 200)], [r.k for r in widen_head(reqs, 1, 10)]
    ([200, 20], [20, 20])
    """
    out = tuple(requests)
    if width <= out[head].k:
        return out
    return (*out[:head], dataclasses.replace(out[head], k=width), *out[head + 1 :])


def taper_chain(requests: Sequence[RetrievalRequest], chain: Sequence[int]) -> tuple[RetrievalRequest, ...]:
    """``requests`` with the links between the chain's (already widened) head and its last entry searched at
    widths falling geometrically from the head's ``k`` to the last entry's ``k`` (module docstring, "A tapered
    chain"), never below a link's own ``k``; the head, the last entry and every entry off the chain unchanged.

    >>> reqs = [RetrievalRequest("title", "dense", q, 20, 0) for q in "abcd"]
    >>> [r.k for r in taper_chain(widen_head(reqs, 0, 400), (0, 1, 2))]
    [400, 89, 20, 20]
    >>> [r.k for r in taper_chain(widen_head(reqs, 0, 400), (0, 1, 2, 3))]
    [400, 147, 54, 20]
    >>> [r.k for r in taper_chain(reqs, (0, 1, 2))], [r.k for r in taper_chain(widen_head(reqs, 0, 400), (0, 1))]
    ([20, 20, 20, 20], [400, 20, 20, 20])
    """
    out = list(requests)
    head, last = out[chain[0]].k, out[chain[-1]].k
    links = len(chain) - 1
    for step, entry in enumerate(chain[1:-1], start=1):
        width = round(head ** (1 - step / links) * last ** (step / links))
        if width > out[entry].k:
            out[entry] = dataclasses.replace(out[entry], k=width)
    return tuple(out)
