"""The pieces of ``bench/scale.py`` that decide what it measures and how it judges answers.

The benchmark itself (corpora up to 1M products on a Milvus server) is far too slow for the suite;
``python bench/scale.py --quick`` is its smoke run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from indexing.config import Config
from rl.bench.relevance import condition
from rl.bench.tree import And, Leaf, Node, Not, Or, from_json, to_json
from serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module
    spec.loader.exec_module(module)
    return module


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


def test_candidates_set_the_engines_planning_options(scale: ModuleType) -> None:
    names = [c.name for c in scale.CANDIDATES]
    runnable, left_out = scale.available_candidates(names)
    assert {c.name for c in runnable} | set(left_out) == set(names)
    assert "fixed" in {c.name for c in runnable}  # needs nothing turned on
    _, defaults = scale.planning_options()
    for c in runnable:
        cfg = scale.candidate_config(Config(), c)
        if defaults:
            planning = cfg.section(ServingSettings).planning
            for key, value in c.planning.items():
                assert getattr(planning, key) == value
    for name, why in left_out.items():
        wanted = next(c for c in scale.CANDIDATES if c.name == name)
        assert any(key in why for key, on in wanted.planning.items() if on)
    with pytest.raises(SystemExit, match="unknown candidate"):
        scale.available_candidates(["fixed", "magic"])


def test_neural_sizes_fit_the_embedding_budget(scale: ModuleType) -> None:
    sizes, rate, budget = (5_000, 50_000, 200_000), 20.0, 3_000.0
    keep, estimate = scale.pick_neural_sizes(sizes, rate, budget, lambda n: False)
    assert sum(n / rate for n in keep) <= budget
    rest = [n for n in sizes if n not in keep]
    assert rest and sum(n / rate for n in keep) + rest[0] / rate > budget
    assert estimate["50k"] == pytest.approx(50_000 / rate)
    # A size already built costs no embedding, so a larger one may now fit.
    keep_built, _ = scale.pick_neural_sizes(sizes, rate, budget, lambda n: n == keep[-1])
    assert len(keep_built) >= len(keep)


def test_power_fit_recovers_the_growth_exponent(scale: ModuleType) -> None:
    a, b = 3e-4, 1.2
    points = [(n, a * n**b) for n in (5_000, 50_000, 200_000)]
    fit = scale.power_fit(points)
    assert fit is not None
    assert fit[0] == pytest.approx(a, rel=1e-6) and fit[1] == pytest.approx(b, rel=1e-6)
    one = scale.power_fit(points[:1])
    assert one is not None and one[1] == 1.0 and math.isclose(one[0] * 5_000, points[0][1])
    assert scale.power_fit([(5_000, math.nan)]) is None


def test_sizes_parse_like_the_corpus_command(scale: ModuleType) -> None:
    assert scale.parse_sizes("1M,5k,50_000,5k") == (5_000, 50_000, 1_000_000)
    assert [scale.size_label(n) for n in (5_000, 1_000_000, 2_500)] == ["5k", "1M", "2500"]
    with pytest.raises(SystemExit, match="--sizes"):
        scale.parse_sizes("5k,lots")


def test_the_break_down_groups_programs_and_names_why_pure_vector_first_results_miss(scale: ModuleType) -> None:
    import doctest

    import scale_diagnosis as diagnosis  # bench/ is on the path once bench/scale.py is loaded

    assert doctest.testmod(diagnosis).failed == 0
    tree = Leaf("text", "review", "sim", ("strong bass",), facet="headphones.bass")
    inst = type("I", (), {"level": "L1", "modalities": ("text",), "tree": json.dumps(to_json(tree)),
                          "program": json.dumps({"sql": "", "retrieval_list": [{"field": "review", "query": "strong bass"}]}),
                          "relevant_n": 40, "gold_id": "p1"})()  # fmt: skip
    t = diagnosis.traits(inst)
    assert (t["kind"], t["searches"], t["relevant"], t["mode"]) == ("pure-vector", "1", "21-100", "dense")
    out = type("R", (), {"ids": ("p2", "p1"), "scores": (0.7, 0.7), "candidates": {"text_1": ["p2", "p1", "p3"]}})()
    rec = diagnosis.record(out, False, "p1")
    assert (rec["gold_rank"], rec["last_candidate"]) == (1, "p3")
    assert diagnosis.classify_miss(rec, "strong bass headphones", "other words") == "tie"
    groups = diagnosis.breakdown([t, t], [rec, diagnosis.record(type("E", (), {"ids": ()})(), False, "p1")])
    assert groups["outcome"] == {"answered": {"n": 1, "p_at_1": 0.0, "empty": 0.0},
                                 "empty": {"n": 1, "p_at_1": 0.0, "empty": 1.0}}  # fmt: skip
