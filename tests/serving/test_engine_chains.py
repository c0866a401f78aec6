"""The chain's widths past ``chain_head_docs`` and the chains within disjuncts, on the real stores (chDB, Milvus
Lite with FLAT indexes): a tapered chain's links and an ``OR`` of pairs, each list checked against its entry's own
top-K among the candidates, computed apart from the engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from indexing.config import Config
from serving.dsl import Program, Retrieval
from serving.settings import PlanningOptions
from tests.serving.conditional_support import (
    HEAD,
    TAIL,
    WIDE,
    N,
    assert_top_k_among,
    engine_of,
    lists,
    pair,
)


@pytest.fixture(scope="module")
def cfg(hashing_index: Callable[..., Config]) -> Config:
    return hashing_index("chains", N, seed=7)


def test_a_tapered_chain_narrows_geometrically_from_the_wide_head_to_the_last_k(cfg: Config) -> None:
    """``chain_taper``: between a widened head and the last entry, each link is searched at a width falling
    geometrically from the head's to the last entry's k, among the list before it, so the third entry selects
    among more than the second's own k; the last list, and so the rows, keep the last entry's k. Where the head
    is not widened, or the chain has two entries, every width is the entry's own."""
    second, third = dataclasses.replace(TAIL, k=5), Retrieval("text", "review", "long battery life", k=3)
    program = Program(pair(HEAD, second).sql + " AND id IN <text_3>", (HEAD, second, third))
    with engine_of(cfg, conditional=True, chain_head_docs=N // 4, chain_taper=True) as tapered:
        assert [r.k for r in tapered.prepare(program).requests] == [4 * HEAD.k, 11, third.k]  # sqrt(40 x 3)
        assert [r.k for r in tapered.prepare(pair(HEAD, TAIL)).requests] == [4 * HEAD.k, TAIL.k]
        result = tapered.execute(program)
        one, two, three = lists(result)
        assert len(one) == 4 * HEAD.k and len(two) == 11
        assert_top_k_among(tapered, dataclasses.replace(second, k=11), one, two)
        assert_top_k_among(tapered, third, two, three)
        assert set(result.ids) == set(three) and len(three) == third.k
    with engine_of(cfg, conditional=True, chain_taper=True) as narrow:  # N documents: the head is not widened
        assert [r.k for r in narrow.prepare(program).requests] == [HEAD.k, second.k, third.k]
    assert PlanningOptions().chain_taper and PlanningOptions().conditional_branches  # the defaults


OR_OF_PAIRS = (
    "SELECT id FROM products WHERE (id IN <text_1> AND id IN <image_2>) OR (price < 250 AND id IN <text_3> AND "
    "id IN <text_4>)"
)


def test_chains_within_disjuncts_return_rows_where_their_top_k_lists_miss(cfg: Config) -> None:
    """``conditional_branches``: without an outer chain, the placeholders conjoined in one disjunct are searched
    as a chain of their own, the second among the first's candidates; another disjunct's pair likewise, apart."""
    third, fourth = (
        Retrieval("text", "title", "Levi's jeans", k=10),
        Retrieval("text", "review", "comfortable fit", k=5),
    )
    program = Program(OR_OF_PAIRS, (HEAD, TAIL, third, fourth))
    branching = {"conditional": True, "conditional_branches": True}
    with engine_of(cfg, **branching) as small:  # N documents, under chain_head_docs: nothing changes
        assert small.prepare(program).branches == () and small.execute(program).ids == ()
    with (
        engine_of(cfg, conditional=True, chain_head_docs=N // 2, conditional_branches=False) as plain,
        engine_of(cfg, **branching, chain_head_docs=N // 2) as on,
    ):
        assert plain.prepare(program).branches == () and plain.execute(program).ids == ()
        prepared = on.prepare(program)
        assert prepared.chain == () and prepared.branches == ((0, 1), (2, 3))
        assert [r.k for r in prepared.requests] == [
            2 * HEAD.k,
            TAIL.k,
            2 * third.k,
            fourth.k,
        ]  # heads widened
        result = on.execute(program)
        one, two, three, four = lists(result)
        assert_top_k_among(on, TAIL, one, two)
        assert_top_k_among(on, fourth, three, four)
        assert two and set(two) <= set(result.ids) <= set(two) | set(four)
        # each branch's first entry is searched as before, wider
        assert one[: HEAD.k] == lists(plain.execute(program))[0]
        # K covering the corpus: the rows of the fixed-K program, ranked alike.
        wide = Program(
            OR_OF_PAIRS, tuple(dataclasses.replace(r, k=WIDE) for r in (HEAD, TAIL, third, fourth))
        )
        with engine_of(cfg) as off:
            a, b = off.execute(wide, k=N), on.execute(wide, k=N)
            assert a.ids and (a.ids, a.scores) == (b.ids, b.scores)
