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
def test_metrics_by_position(gold: str, rank: int | None, hit1: float, hit3: float, rr: float, ndcg3: float) -> None:
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
    assert not failed.executed and failed.as_dict() == {"hit@1": 0.0, "hit@3": 0.0, "mrr": 0.0, "ndcg@3": 0.0, "exec": 0.0}
    empty = score_query([], "P1")
    assert empty.executed and empty.as_dict()["exec"] == 1.0 and empty.hit1 == 0.0


def test_execution_success_rate() -> None:
    assert execution_success_rate([["a"], None, [], None]) == 0.5
    assert execution_success_rate([]) == 0.0
