"""Metrics on hand-computed rankings: hits, misses, cut-offs, failures."""

from __future__ import annotations

import math

import pytest

from rl.eval.metrics import (
    execution_success_rate,
    hit_at,
    ndcg_at,
    rank_of,
    reciprocal_rank,
    score_query,
)

RANKING = ["P05", "P02", "P09", "P01", "P07"]


@pytest.mark.parametrize(
    ("gold", "rank", "hit1", "hit3", "rr", "ndcg3"),
    [
        ("P05", 1, 1.0, 1.0, 1.0, 1.0),
        ("P02", 2, 0.0, 1.0, 0.5, 1 / math.log2(3)),
        ("P09", 3, 0.0, 1.0, 1 / 3, 0.5),
        ("P01", 4, 0.0, 0.0, 0.25, 0.0),
        ("P99", None, 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_metrics_by_position(
    gold: str, rank: int | None, hit1: float, hit3: float, rr: float, ndcg3: float
) -> None:
    assert rank_of(RANKING, gold) == rank
    assert hit_at(RANKING, gold, 1) == hit1
    assert hit_at(RANKING, gold, 3) == hit3
    assert reciprocal_rank(RANKING, gold) == pytest.approx(rr)
    assert ndcg_at(RANKING, gold, 3) == pytest.approx(ndcg3)


def test_cutoff_drops_deep_gold() -> None:
    ranking = [f"E{i:03d}" for i in range(30)]
    assert reciprocal_rank(ranking, "E024", cutoff=20) == 0.0
    assert reciprocal_rank(ranking, "E019", cutoff=20) == pytest.approx(1 / 20)
    s = score_query(ranking, "E024", cutoff=20)
    assert s.rank is None and s.executed and s.mrr == 0.0


def test_tied_scores_are_already_ordered_by_the_engine() -> None:
    # Two ids tied on score come back ordered by id (the engine's contract); position alone counts.
    tied = ["P10", "P11", "P03"]
    assert score_query(tied, "P11").as_dict() == {
        "hit@1": 0.0,
        "hit@3": 1.0,
        "mrr": 0.5,
        "ndcg@3": pytest.approx(1 / math.log2(3)),
        "exec": 1.0,
    }


def test_duplicate_ids_count_first_position() -> None:
    assert rank_of(["P1", "P2", "P2"], "P2") == 2


def test_failure_and_empty_ranking() -> None:
    failed = score_query(None, "P1")
    assert not failed.executed and failed.as_dict() == {
        "hit@1": 0.0,
        "hit@3": 0.0,
        "mrr": 0.0,
        "ndcg@3": 0.0,
        "exec": 0.0,
    }
    empty = score_query([], "P1")
    assert empty.executed and empty.as_dict()["exec"] == 1.0 and empty.hit1 == 0.0


def test_execution_success_rate() -> None:
    assert execution_success_rate([["a"], None, [], None]) == 0.5
    assert execution_success_rate([]) == 0.0


# -- the library (ir_measures over trec_eval) against the hand-computed reference, and graded metrics --


def test_library_gold_metrics_equal_the_hand_computed_ones_on_every_position_and_cutoff() -> None:
    import random

    from rl.eval.metrics import score_queries

    rng = random.Random(0)
    rankings: list[list[str] | None] = []
    golds = []
    for n in range(300):
        ids = [f"D{rng.randrange(40):02d}" for _ in range(rng.randrange(0, 25))]
        rankings.append(ids if n % 17 else None)
        golds.append(f"D{rng.randrange(40):02d}")
    for cutoff in (3, 5, 20):
        got = score_queries(rankings, golds, cutoff=cutoff)
        for ranking, gold, s in zip(rankings, golds, got, strict=True):
            top = (ranking or [])[:cutoff]
            assert s.executed == (ranking is not None)
            assert s.hit1 == hit_at(top, gold, 1)
            assert s.hit3 == hit_at(top, gold, 3)
            assert s.mrr == pytest.approx(reciprocal_rank(top, gold, cutoff))
            assert s.ndcg3 == pytest.approx(ndcg_at(top, gold, 3))


def _graded(
    ranking: list[str] | None, relevant: tuple[str, ...], n: int | None = None, cutoff: int = 20
) -> dict[str, float]:
    from rl.eval.metrics import Relevant

    scores = score_query(
        ranking, "G", cutoff=cutoff, relevant=Relevant(relevant, len(relevant) if n is None else n)
    )
    return {k: v for k, v in scores.as_dict().items() if k in ("p@1", "p@5", "ndcg@10", "recall@10")}


def test_graded_metrics_by_hand() -> None:
    # Relevant: G, A, B. Returned: A (relevant), X, G (relevant), Y, Z, B (relevant).
    got = _graded(["A", "X", "G", "Y", "Z", "B"], ("A", "B", "G"))
    dcg = 1 + 1 / math.log2(4) + 1 / math.log2(7)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert got == {
        "p@1": 1.0,
        "p@5": pytest.approx(2 / 5),
        "ndcg@10": pytest.approx(dcg / ideal),
        "recall@10": pytest.approx(3 / 3),
    }
    # The first result is not relevant: P@1 is 0 though the gold's request is met further down.
    assert _graded(["X", "G"], ("G",))["p@1"] == 0.0


def test_recall_is_normalised_by_min_10_and_the_relevant_size() -> None:
    many = tuple(f"R{i:02d}" for i in range(30))
    got = _graded(list(many[:10]), many)
    assert got["recall@10"] == 1.0 and got["p@5"] == 1.0 and got["ndcg@10"] == pytest.approx(1.0)
    half = _graded([*many[:5], "X1", "X2", "X3", "X4", "X5"], many)
    assert half["recall@10"] == pytest.approx(0.5)


def test_tied_positions_keep_the_methods_order() -> None:
    # trec_eval breaks score ties by document id; the ranking's own order must win.
    assert _graded(["Z", "A"], ("A",))["p@1"] == 0.0
    assert _graded(["A", "Z"], ("A",))["p@1"] == 1.0
    assert _graded(["B", "B", "A"], ("A",))["p@5"] == pytest.approx(1 / 5)  # a repeat counts once


def test_empty_relevant_sets_failures_and_empty_rankings_score_zero() -> None:
    zero = {"p@1": 0.0, "p@5": 0.0, "ndcg@10": 0.0, "recall@10": 0.0}
    assert _graded(["A", "B"], ()) == zero
    assert _graded(None, ("A",)) == zero
    assert _graded([], ("A",)) == zero


def test_capped_relevant_sets_use_their_full_size() -> None:
    stored = tuple(f"R{i:04d}" for i in range(1000))
    # 5000 relevant, 1000 stored: an id outside the stored ones counts as not relevant (a lower bound).
    got = _graded(["R0000", "Q9999", "R0001"], stored, n=5000)
    assert got["p@1"] == 1.0 and got["p@5"] == pytest.approx(2 / 5)
    assert got["recall@10"] == pytest.approx(2 / 10)
    ideal = sum(1 / math.log2(i + 2) for i in range(10))
    assert got["ndcg@10"] == pytest.approx((1 + 1 / math.log2(4)) / ideal)


def test_no_relevant_set_leaves_the_graded_metrics_out() -> None:
    assert set(score_query(["A"], "A").as_dict()) == {"hit@1", "hit@3", "mrr", "ndcg@3", "exec"}
