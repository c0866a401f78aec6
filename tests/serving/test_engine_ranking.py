"""The ranking contract as a pure function (DESIGN.md section 3); the engine-level checks live in
test_engine_execute.py."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from serving.dsl.limits import DEFAULT_LIMITS
from serving.engine.ranking import RRF_K, contract_scores, rank_results, rrf_fuse, rrf_term


def test_constant_comes_from_the_language_limits() -> None:
    assert RRF_K == DEFAULT_LIMITS.rrf_constant == 60
    assert rrf_term(1) == 1 / 61


def test_score_is_the_sum_over_positive_lists() -> None:
    lists = [["a", "b", "c"], ["c", "a"]]
    scores = contract_scores(["a", "b", "c", "z"], lists)
    assert scores["a"] == math.fsum([1 / 61, 1 / 62])
    assert scores["b"] == 1 / 62
    assert scores["c"] == math.fsum([1 / 63, 1 / 61])
    assert scores["z"] == 0.0


def test_order_by_score_then_id() -> None:
    ranked = rank_results(["z", "c", "b", "a"], [["a", "b", "c"], ["c", "a"]], sql_ordered=False, k=10)
    assert ranked.ids == ("a", "c", "b", "z")
    assert list(ranked.scores) == sorted(ranked.scores, reverse=True)


def test_ties_fall_to_the_id() -> None:
    # x is 1st in list one and 2nd in list two; y the other way round: equal sums, so x < y decides.
    ranked = rank_results(["y", "x"], [["x", "y"], ["y", "x"]], sql_ordered=False, k=2)
    assert ranked.scores[0] == ranked.scores[1]
    assert ranked.ids == ("x", "y")


def test_equal_multisets_of_ranks_give_bit_identical_scores() -> None:
    lists = [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    scores = contract_scores(["a", "b", "c"], lists)
    assert scores["a"] == scores["b"] == scores["c"]
    assert rank_results(["c", "b", "a"], lists, sql_ordered=False, k=3).ids == ("a", "b", "c")


def test_no_positive_list_orders_by_id() -> None:
    ranked = rank_results(["P3", "P10", "P1"], [], sql_ordered=False, k=5)
    assert ranked.ids == ("P1", "P10", "P3")
    assert ranked.scores == (0.0, 0.0, 0.0)


def test_sql_order_wins_when_ordered() -> None:
    ranked = rank_results(["c", "a", "b", "a"], [["a", "b", "c"]], sql_ordered=True, k=3)
    assert ranked.ids == ("c", "a", "b")
    assert ranked.scores == (1 / 63, 1 / 61, 1 / 62)


def test_k_cuts() -> None:
    assert rank_results(["a", "b", "c"], [], sql_ordered=False, k=2).ids == ("a", "b")
    assert rank_results(["a", "b", "c"], [], sql_ordered=False, k=0).ids == ()


def test_fuse_is_rrf_of_the_lists() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    sparse = [("c", 12.0), ("d", 3.0)]
    fused = rrf_fuse([dense, sparse], 3)
    assert [doc for doc, _ in fused] == ["c", "a", "b"]
    assert fused[0][1] == math.fsum([1 / 63, 1 / 61])


ids = st.text(alphabet="PQ0123456789", min_size=1, max_size=4)


@given(
    result=st.lists(ids, max_size=30),
    lists=st.lists(st.lists(ids, max_size=20, unique=True), max_size=4),
    k=st.integers(0, 40),
)
def test_contract_properties(result: list[str], lists: list[list[str]], k: int) -> None:
    ranked = rank_results(result, lists, sql_ordered=False, k=k)
    assert len(ranked.ids) == min(k, len(set(result)))
    assert set(ranked.ids) <= set(result)
    keys = [(-s, doc) for doc, s in zip(ranked.ids, ranked.scores, strict=True)]
    assert keys == sorted(keys)
    in_lists = {doc for lst in lists for doc in lst}
    for doc, score in zip(ranked.ids, ranked.scores, strict=True):
        assert (score > 0) == (doc in in_lists)
