"""The pure parts of benchmark synthesis: shapes, compilation, verbalization, storage, rewriter cache."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.openai_client import NO_RETRY
from indexing.schema import EMAILS, PRODUCTS
from indexing.workspace import Workspace
from rl.datasets.compile import compile_tree
from rl.datasets.errors import BenchError
from rl.datasets.rewriter import Rewriter, RewriterConfig, build_request, cache_key, keeps_anchors
from rl.datasets.store import Instance, check_sizes, load_manifest, load_split, write_bench
from rl.datasets.structure import SNot, SOr, count_slots, quotas, shape_for
from rl.datasets.tree import And, Leaf, Node, Not, Or, leaves, operators, signed_leaves
from rl.datasets.verbalize import FAMILIES, families, verbalize
from serving.dsl import parse_program, strip_retrievals, validate


@given(st.integers(min_value=1, max_value=100_000))
def test_quotas_sum_and_follow_the_level_mix(total: int) -> None:
    q = quotas(total)
    assert sum(q.values()) == total
    for level, share in ((1, 0.4), (2, 0.4), (3, 0.2)):
        assert abs(q[level] - share * total) <= 1


def _has(shape: object, kind: type) -> bool:
    if isinstance(shape, kind):
        return True
    if isinstance(shape, SNot):
        return _has(shape.part, kind)
    parts = getattr(shape, "parts", ())
    return any(_has(p, kind) for p in parts)


@pytest.mark.parametrize("seed", range(40))
def test_shapes_have_the_paper_sizes(seed: int) -> None:
    rng = random.Random(seed)
    assert count_slots(shape_for(1, rng)) == 1
    assert count_slots(shape_for(2, rng)) in (2, 3)
    l3 = shape_for(3, rng)
    assert count_slots(l3) in (4, 5)
    assert _has(l3, SOr)


def _brand(v: str) -> Leaf:
    return Leaf("structured", "brand", "=", (v,))


SAMPLE_PRODUCTS: list[Node] = [
    Leaf("text", "review", "sim", ("strong isolation from surrounding sound",)),
    And((_brand("Levi's"), Leaf("structured", "price", "between", (40, 80)))),
    And(
        (
            Leaf("structured", "rating", ">=", (4.5,)),
            Or((_brand("Sony"), _brand("Bose"))),
            Not(Leaf("image", "image", "sim", ("snow-white",))),
            Leaf("structured", "in_stock", "=", (True,)),
        )
    ),
    And(
        (
            Leaf("structured", "release_date", ">=", (2022,), "year"),
            Not(
                Or(
                    (
                        Leaf("text", "description", "sim", ("fast processor",)),
                        Leaf("structured", "color", "=", ("red",)),
                    )
                )
            ),
            Leaf("structured", "category", "in", ("laptops", "phones")),
        )
    ),
    Or(
        (
            And(
                (
                    Leaf("structured", "review_count", ">", (100,)),
                    Leaf("text", "review", "sim", ("good value",)),
                )
            ),
            And((Leaf("structured", "color", "=", ("navy",)), Not(_brand("O'Neill")))),
        )
    ),
]
SAMPLE_EMAILS: list[Node] = [
    And(
        (
            Leaf("structured", "date", "between", ("2023-01-01", "2023-02-15"), "date"),
            Leaf("structured", "is_read", "=", (False,)),
            Not(Leaf("structured", "sender_domain", "in", ("globex.com", "hooli.com"))),
            Leaf("text", "body", "sim", ("budget freeze",)),
        )
    ),
    Or((Leaf("structured", "folder", "=", ("archive",)), Leaf("structured", "has_attachment", "=", (True,)))),
]


@pytest.mark.parametrize(
    ("tree", "schema"), [(t, PRODUCTS) for t in SAMPLE_PRODUCTS] + [(t, EMAILS) for t in SAMPLE_EMAILS]
)
def test_compiled_programs_validate_and_keep_every_leaf(tree: Node, schema: object) -> None:
    program = compile_tree(tree, schema.table)  # type: ignore[attr-defined]
    again = parse_program(program.to_json())
    validated = validate(again, schema)  # type: ignore[arg-type]
    semantic = [(leaf, neg) for leaf, neg in signed_leaves(tree) if leaf.semantic]
    assert [e.query for e in again.retrieval_list] == [leaf.phrase for leaf, _ in semantic]
    # Negated semantic leaves compile to ``id NOT IN`` and so never score in the ranking.
    assert sorted(validated.positive_entries) == [i for i, (_, neg) in enumerate(semantic) if not neg]
    stripped = strip_retrievals(validated)
    assert "<text_" not in stripped and "<image_" not in stripped
    for leaf in leaves(tree):
        if not leaf.semantic and isinstance(leaf.values[0], str) and not leaf.transform:
            assert str(leaf.values[0]).replace("'", "''") in program.sql


def test_quotes_inside_values_stay_one_literal() -> None:
    program = compile_tree(And((_brand("Levi's"), Not(_brand("O'Neill")))), "products")
    assert "'Levi''s'" in program.sql and "'O''Neill'" in program.sql
    validate(program, PRODUCTS)


def test_gold_entries_have_the_languages_default_width() -> None:
    from serving.dsl import DEFAULT_LIMITS

    program = compile_tree(And((_brand("Sony"), SAMPLE_PRODUCTS[2])), "products")
    assert program.retrieval_list and {e.k for e in program.retrieval_list} == {DEFAULT_LIMITS.default_k}
    # The width is the language default, so the stored program leaves it out.
    assert all("k" not in e for e in json.loads(program.to_json())["retrieval_list"])
    assert {e.k for e in compile_tree(SAMPLE_PRODUCTS[2], "products", k=5).retrieval_list} == {5}


def test_operators_name_semantic_membership_and_logic() -> None:
    ops = operators(SAMPLE_PRODUCTS[2])
    assert {"AND", ">=", "=", "id NOT IN <image>"} <= set(ops)
    assert "OR" in operators(SAMPLE_PRODUCTS[4])


def test_ood_families_are_held_out() -> None:
    train = {f.name for f in families(ood=False)}
    ood = {f.name for f in families(ood=True)}
    assert train and ood and not train & ood
    assert train | ood == {f.name for f in FAMILIES}


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.sampled_from(FAMILIES))
def test_every_family_says_every_value_and_phrase(seed: int, fam: object) -> None:
    for domain, trees in (("ecommerce", SAMPLE_PRODUCTS), ("email", SAMPLE_EMAILS)):
        for tree in trees:
            text = verbalize(tree, domain, fam, random.Random(seed))  # type: ignore[arg-type]
            assert text == " ".join(text.split())
            assert not re.search(r"\{(v|a|b|p|n|np|NP|conds)\}", text), text
            for leaf in leaves(tree):
                if leaf.semantic:
                    assert leaf.phrase in text
                elif isinstance(leaf.values[0], str) and not leaf.transform and leaf.field not in ("date",):
                    # Categories become the (plural) head noun; other values appear as written.
                    assert str(leaf.values[0]).rstrip("s") in text


def _instance(n: int, split: str = "test") -> Instance:
    program = compile_tree(SAMPLE_PRODUCTS[n % len(SAMPLE_PRODUCTS)], "products")
    return Instance(
        qid=f"ecommerce-{split}-{n:06d}",
        split=split,
        domain="ecommerce",
        nl=f"request {n}",
        program=program.to_json(),
        gold_id=f"P{n:05d}",
        level=f"L{1 + n % 3}",
        modalities=("structured", "text"),
        family="terse",
        operators=("AND", "IN"),
        tree="{}",
    )


def test_splits_round_trip_and_replace_atomically(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    splits = {s: [_instance(i, s) for i in range(5)] for s in ("train", "test", "ood")}
    manifest = write_bench(ws, "ecommerce", splits, {"seed": 3})
    assert manifest["splits"] == {"train": 5, "test": 5, "ood": 5}
    assert load_split(ws, "ecommerce", "test") == splits["test"]
    assert load_manifest(ws, "ecommerce")["seed"] == 3
    broken = {**splits, "ood": [_instance(0, "ood"), "not an instance"]}
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow raises, nothing may change
        write_bench(ws, "ecommerce", broken, {"seed": 4})  # type: ignore[arg-type]
    assert load_manifest(ws, "ecommerce")["seed"] == 3
    assert load_split(ws, "ecommerce", "ood") == splits["ood"]
    assert not list(tmp_path.glob("bench/*.partial"))


def test_the_manifest_fingerprints_every_instance(tmp_path: Path) -> None:
    import dataclasses

    splits = {s: [_instance(i, s) for i in range(4)] for s in ("train", "test", "ood")}
    first = write_bench(Workspace(tmp_path / "a"), "ecommerce", splits, {"seed": 1})["fingerprint"]
    assert write_bench(Workspace(tmp_path / "b"), "ecommerce", splits, {"seed": 2})["fingerprint"] == first
    changed = {
        **splits,
        "test": [*splits["test"][:3], dataclasses.replace(splits["test"][3], gold_id="P99999")],
    }
    assert write_bench(Workspace(tmp_path / "c"), "ecommerce", changed, {"seed": 1})["fingerprint"] != first
    assert load_manifest(Workspace(tmp_path / "a"), "ecommerce")["fingerprint"] == first


def test_bad_split_and_missing_benchmark_are_typed_errors(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    with pytest.raises(BenchError) as missing:
        load_split(ws, "email", "test")
    assert missing.value.code == "no_bench"
    with pytest.raises(BenchError) as bad:
        load_split(ws, "email", "dev")
    assert bad.value.code == "bench_split"
    with pytest.raises(BenchError):
        check_sizes({"train": 10, "test": 0, "ood": 5})


def test_rewriter_request_and_anchor_check() -> None:
    cfg = RewriterConfig(url="http://rewriter.invalid/v1", model="m")
    body = build_request(cfg, "Sony headphones under $200")
    assert body["model"] == "m" and body["messages"][-1]["content"].endswith("Sony headphones under $200")
    assert keeps_anchors("cheap SONY cans below $200", ["Sony", "200"])
    assert not keeps_anchors("cheap cans", ["Sony"])


def test_rewriter_answers_from_its_cache_without_a_request(tmp_path: Path) -> None:
    # A closed local port, tried once: a cache miss fails at once, and no service anywhere is contacted.
    cfg = RewriterConfig(url="http://127.0.0.1:9/v1", model="m", timeout_s=0.5, retry=NO_RETRY)
    rw = Rewriter(cfg, tmp_path)
    key = cache_key(cfg.model, build_request(cfg, "Find red jackets")["messages"])
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"content": "Show me jackets in red"}))
    assert rw.rewrite("Find red jackets") == "Show me jackets in red"
    assert (rw.cached, rw.sent) == (1, 0)
    with pytest.raises(BenchError) as failed:
        rw.rewrite("Find blue jackets")
    assert failed.value.code == "bench_rewriter"


@pytest.mark.skipif(
    not os.environ.get("PRORE_REWRITER_URL"),
    reason="set PRORE_REWRITER_URL (and PRORE_REWRITER_MODEL) to test against a live chat-completions endpoint",
)
def test_rewriter_against_a_live_endpoint(tmp_path: Path) -> None:
    cfg = RewriterConfig(
        url=os.environ["PRORE_REWRITER_URL"], model=os.environ.get("PRORE_REWRITER_MODEL", "default")
    )
    rw = Rewriter(cfg, tmp_path)
    first = rw.rewrite("Show me Sony headphones under $200")
    assert first and rw.sent == 1
    assert rw.rewrite("Show me Sony headphones under $200") == first and rw.cached == 1
