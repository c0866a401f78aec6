"""The pieces of ``bench/scale.py`` (:mod:`rl.eval.scale`) that decide what it measures and how it judges answers.

The benchmark itself (corpora up to 1M products on a Milvus server) is far too slow for the suite;
``python bench/scale.py --quick`` is its smoke run.
"""

from __future__ import annotations

import doctest
import json
import math

import pytest

from indexing.config import Config
from rl.datasets.relevance import condition
from rl.datasets.tree import And, Leaf, Node, Not, Or, from_json, to_json
from rl.eval.scale import diagnosis
from rl.eval.scale.estimates import pick_neural_sizes, power_fit
from rl.eval.scale.runs import (
    CANDIDATES,
    available_candidates,
    candidate_config,
    parse_sizes,
    planning_options,
    size_label,
)
from serving.settings import ServingSettings

TREES: list[Node] = [
    Leaf("text", "review", "sim", ("strong bass",), facet="headphones.bass"),
    And(
        (
            Leaf("structured", "price", "<=", (199.99,)),
            Leaf("structured", "brand", "in", ("Sony", "Levi's")),
            Not(Leaf("image", "image", "sim", ("white",), facet="color.white")),
        )
    ),
    Or(
        (
            And(
                (
                    Leaf(
                        "structured",
                        "release_date",
                        "between",
                        ("2023-01-01", "2023-06-30"),
                        transform="date",
                    ),
                    Leaf("structured", "in_stock", "=", (True,)),
                )
            ),
            Not(
                Or(
                    (
                        Leaf("structured", "release_date", ">=", (2022,), transform="year"),
                        Leaf("text", "description", "sim", ("fast autofocus",), facet="camera.af"),
                    )
                )
            ),
        )
    ),
]


@pytest.mark.parametrize("tree", TREES, ids=["leaf", "and-not", "nested"])
def test_instance_trees_read_back(tree: Node) -> None:
    """An instance stores its tree as JSON text; the benchmark reads it back to the same tree, so the
    relevance condition it judges first results by is the one synthesis computed relevant sets with."""
    stored = json.dumps(to_json(tree), ensure_ascii=False)
    back = from_json(json.loads(stored))
    assert back == tree
    assert condition(back) == condition(tree)


def test_candidates_set_the_engines_planning_options() -> None:
    names = [c.name for c in CANDIDATES]
    runnable, left_out = available_candidates(names)
    assert {c.name for c in runnable} | set(left_out) == set(names)
    assert "fixed" in {c.name for c in runnable}  # needs nothing turned on
    _, defaults = planning_options()
    for c in runnable:
        cfg = candidate_config(Config(), c)
        if defaults:
            planning = cfg.section(ServingSettings).planning
            for key, value in c.planning.items():
                assert getattr(planning, key) == value
    for name, why in left_out.items():
        wanted = next(c for c in CANDIDATES if c.name == name)
        assert any(key in why for key, on in wanted.planning.items() if on)
    with pytest.raises(SystemExit, match="unknown candidate"):
        available_candidates(["fixed", "magic"])


def test_neural_sizes_fit_the_embedding_budget() -> None:
    sizes, rate, budget = (5_000, 50_000, 200_000), 20.0, 3_000.0
    keep, estimate = pick_neural_sizes(sizes, rate, budget, lambda n: False)
    assert sum(n / rate for n in keep) <= budget
    rest = [n for n in sizes if n not in keep]
    assert rest and sum(n / rate for n in keep) + rest[0] / rate > budget
    assert estimate["50k"] == pytest.approx(50_000 / rate)
    # A size already built costs no embedding, so a larger one may now fit.
    keep_built, _ = pick_neural_sizes(sizes, rate, budget, lambda n: n == keep[-1])
    assert len(keep_built) >= len(keep)


def test_power_fit_recovers_the_growth_exponent() -> None:
    a, b = 3e-4, 1.2
    points = [(n, a * n**b) for n in (5_000, 50_000, 200_000)]
    fit = power_fit(points)
    assert fit is not None
    assert fit[0] == pytest.approx(a, rel=1e-6) and fit[1] == pytest.approx(b, rel=1e-6)
    one = power_fit(points[:1])
    assert one is not None and one[1] == 1.0 and math.isclose(one[0] * 5_000, points[0][1])
    assert power_fit([(5_000, math.nan)]) is None


def test_sizes_parse_like_the_corpus_command() -> None:
    assert parse_sizes("1M,5k,50_000,5k") == (5_000, 50_000, 1_000_000)
    assert [size_label(n) for n in (5_000, 1_000_000, 2_500)] == ["5k", "1M", "2500"]
    with pytest.raises(SystemExit, match="--sizes"):
        parse_sizes("5k,lots")


def test_the_break_down_groups_programs_and_names_why_pure_vector_first_results_miss() -> None:
    assert doctest.testmod(diagnosis).failed == 0
    tree = Leaf("text", "review", "sim", ("strong bass",), facet="headphones.bass")
    inst = type("I", (), {"level": "L1", "modalities": ("text",), "tree": json.dumps(to_json(tree)),
                          "program": json.dumps({"sql": "", "retrieval_list": [{"field": "review", "query": "strong bass"}]}),
                          "relevant_n": 40, "gold_id": "p1"})()  # fmt: skip
    t = diagnosis.traits(inst)
    assert (t["kind"], t["searches"], t["relevant"], t["mode"]) == ("pure-vector", "1", "21-100", "dense")
    out = type(
        "R", (), {"ids": ("p2", "p1"), "scores": (0.7, 0.7), "candidates": {"text_1": ["p2", "p1", "p3"]}}
    )()
    rec = diagnosis.record(out, False, "p1")
    assert (rec["gold_rank"], rec["last_candidate"]) == (1, "p3")
    assert diagnosis.classify_miss(rec, "strong bass headphones", "other words") == "tie"
    groups = diagnosis.breakdown([t, t], [rec, diagnosis.record(type("E", (), {"ids": ()})(), False, "p1")])
    assert groups["outcome"] == {"answered": {"n": 1, "p_at_1": 0.0, "empty": 0.0},
                                 "empty": {"n": 1, "p_at_1": 0.0, "empty": 1.0}}  # fmt: skip


def test_whether_the_gold_reaches_the_kth_candidate_is_scored_as_the_store_scores(
    small_index_cfg: Config,
) -> None:
    from serving.engine import Engine

    with Engine.open(small_index_cfg, "ecommerce") as engine:
        handle = engine.handle
        field = handle.schema.vector_fields[0]
        query = "strong bass"
        hits = handle.vectors.search(handle.collection, field, handle.embedder(field).embed([query]), 10)[0]
        (best, best_score), (tenth, tenth_score) = hits[0], hits[-1]
        assert best_score > tenth_score + 1e-4, hits
        t = {"mode": "dense", "query": query, "field": field, "gold": best}
        assert diagnosis._reaches_k(handle, t, {"last_candidate": tenth}) is True
        assert diagnosis._reaches_k(handle, {**t, "gold": tenth}, {"last_candidate": best}) is False
        assert diagnosis._reaches_k(handle, {**t, "mode": "sparse"}, {"last_candidate": tenth}) is None
