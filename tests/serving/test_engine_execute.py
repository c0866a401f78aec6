"""The engine on real chDB, Milvus Lite and MiniLM (the session's 600-document corpora).

Programs are built from actual documents, and every expected result is recomputed independently:
structured conditions by a trusted SQL query of the test, candidate lists through the index handle.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from indexing.config import Config
from indexing.stores.base import Hit
from serving.dsl import Program, parse_program
from serving.engine import (
    Engine,
    ExecutionError,
    ExecutionLimits,
    ExecutionResult,
    PlanningOptions,
    RerankRequest,
    candidate_name,
    rrf_fuse,
)
from serving.engine.ranking import RRF_K


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


def ids_where(engine: Engine, where: str) -> set[str]:
    """The oracle for structured conditions: the test's own SQL on the same table."""
    return {str(r[0]) for r in engine.handle.sql.query(f"SELECT id FROM {engine.handle.table} WHERE {where}")}


def doc(engine: Engine, offset: int) -> dict[str, Any]:
    cols = ["id", "brand", "category", "price", "rating", "title", "review", "image"]
    row = engine.handle.sql.query(
        f"SELECT {', '.join(cols)} FROM {engine.handle.table} ORDER BY id LIMIT 1 OFFSET {offset}"
    )[0]
    return dict(zip(cols, row, strict=True))


def q(text: str) -> str:
    """A SQL string literal for a value the test itself took from the corpus."""
    return "'" + text.replace("'", "''") + "'"


def prog(sql: str, *entries: dict[str, Any]) -> Program:
    return parse_program({"sql": sql, "retrieval_list": list(entries)})


def text(field: str, query: str, **rpl: Any) -> dict[str, Any]:
    return {"type": "text", "field": field, "query": query, **rpl}


def image(query: str, **rpl: Any) -> dict[str, Any]:
    return {"type": "image", "field": "image", "query": query, **rpl}


def dense_oracle(engine: Engine, field: str, query: str, k: int, width: int = 50) -> list[str]:
    hits = engine.handle.dense_search(field, [query], width)[0]
    return [d for d, _ in sorted(hits, key=lambda h: (-h[1], h[0]))[:k]]


def sparse_oracle(engine: Engine, field: str, query: str, k: int) -> list[Hit]:
    hits = engine.handle.sparse_search(field, [query], 50)[0]
    return sorted(((d, s) for d, s in hits if s > 0), key=lambda h: (-h[1], h[0]))[:k]


def contract_order(result: ExecutionResult, positive: Sequence[str]) -> list[str]:
    """Recompute the ranking contract from the result's own candidate lists."""

    def score(d: str) -> float:
        return math.fsum(
            1 / (RRF_K + result.candidates[p].index(d) + 1) for p in positive if d in result.candidates[p]
        )

    return sorted(result.ids, key=lambda d: (-score(d), d))


def test_gold_document_comes_first(engine: Engine) -> None:
    gold = doc(engine, 7)
    p = prog(
        f"SELECT DISTINCT id FROM products WHERE brand = {q(gold['brand'])} AND id IN <text_1>",
        text("review", gold["review"]),
    )
    res = engine.execute(p, k=5)
    assert res.ids[0] == gold["id"]
    assert res.candidates["text_1"][0] == gold["id"]
    assert res.scores[0] == 1 / (RRF_K + 1)
    assert set(res.timings) >= {"validate", "embed", "ann", "sparse", "rerank", "sql", "rank", "total"}


def test_and_is_the_intersection(engine: Engine) -> None:
    gold = doc(engine, 11)
    p = prog(
        f"SELECT id FROM products WHERE category = {q(gold['category'])} AND id IN <text_1>",
        text("title", gold["title"]),
    )
    res = engine.execute(p, k=50)
    expected = set(res.candidates["text_1"]) & ids_where(engine, f"category = {q(gold['category'])}")
    assert set(res.ids) == expected and gold["id"] in expected
    assert list(res.ids) == contract_order(res, ["text_1"])


def test_or_is_the_union(engine: Engine) -> None:
    gold = doc(engine, 20)
    p = prog(
        f"SELECT id FROM products WHERE brand = {q(gold['brand'])} OR id IN <text_1>",
        text("review", gold["review"], k=10),
    )
    res = engine.execute(p, k=100)
    assert set(res.ids) == ids_where(engine, f"brand = {q(gold['brand'])}") | set(res.candidates["text_1"])
    # Ids only the brand brought in score 0 and come after every candidate, by id.
    tail = [d for d in res.ids if d not in res.candidates["text_1"]]
    assert list(res.ids[-len(tail) :]) == sorted(tail)


def test_not_in_excludes_and_does_not_score(engine: Engine) -> None:
    gold = doc(engine, 3)
    brand = q(gold["brand"])
    p = prog(
        f"SELECT id FROM products WHERE brand = {brand} AND id NOT IN <text_1>",
        text("review", gold["review"]),
    )
    res = engine.execute(p, k=100)
    assert set(res.ids) == ids_where(engine, f"brand = {brand}") - set(res.candidates["text_1"])
    assert gold["id"] not in res.ids
    assert all(s == 0 for s in res.scores) and list(res.ids) == sorted(res.ids)


def test_not_in_is_excluded_from_scoring_next_to_a_positive(engine: Engine) -> None:
    gold = doc(engine, 40)
    p = prog(
        "SELECT id FROM products WHERE id IN <text_1> AND id NOT IN <image_2>",
        text("review", gold["review"], k=50),
        image("bright red leather", k=10),
    )
    res = engine.execute(p, k=50)
    assert set(res.ids) == set(res.candidates["text_1"]) - set(res.candidates["image_2"])
    for d, s in zip(res.ids, res.scores, strict=True):
        assert s == 1 / (RRF_K + res.candidates["text_1"].index(d) + 1)


def test_nested_subquery(engine: Engine) -> None:
    gold = doc(engine, 5)
    p = prog(
        "SELECT id FROM products WHERE rating >= 2 AND id IN "
        f"(SELECT id FROM products WHERE price <= {gold['price']} AND id IN <text_1>)",
        text("review", gold["review"]),
    )
    res = engine.execute(p, k=50)
    expected = ids_where(engine, f"rating >= 2 AND price <= {gold['price']}") & set(res.candidates["text_1"])
    assert set(res.ids) == expected
    assert list(res.ids) == contract_order(res, ["text_1"])


def test_two_placeholders_on_one_field(engine: Engine) -> None:
    gold = doc(engine, 9)
    sentences = [s for s in gold["review"].split(". ") if s]
    p = prog(
        "SELECT id FROM products WHERE id IN <text_1> OR id IN <text_2>",
        text("review", sentences[0], k=10),
        text("review", sentences[-1], k=10),
    )
    res = engine.execute(p, k=50)
    assert set(res.ids) == set(res.candidates["text_1"]) | set(res.candidates["text_2"])
    assert res.candidates["text_1"] == tuple(dense_oracle(engine, "review", sentences[0], 10))
    assert res.candidates["text_2"] == tuple(dense_oracle(engine, "review", sentences[-1], 10))
    assert list(res.ids) == contract_order(res, ["text_1", "text_2"])
    # One embedding call and one vector search served both entries.
    fresh = Engine(engine.handle)
    fresh.execute(p)
    assert fresh.retriever.calls["embed"] == 1 and fresh.retriever.calls["ann"] == 1


def test_text_with_image(engine: Engine, small_index_cfg: Config) -> None:
    """Under fixed K the image entry is its top 50 over the corpus; under the default engine, its top 50 among the
    text entry's list (conditional evaluation). Both rank the gold first, by the contract's order."""
    gold = doc(engine, 14)
    p = prog(
        "SELECT id FROM products WHERE id IN <text_1> AND id IN <image_2>",
        text("title", gold["title"], k=50),
        image(gold["image"], k=50),
    )
    with Engine.open(small_index_cfg, "ecommerce", planning=PlanningOptions.fixed_k()) as paper:
        fixed = paper.execute(p, k=10)
    default = engine.execute(p, k=10)
    everywhere = dense_oracle(engine, "image", gold["image"], 2_000, width=2_000)  # the whole small corpus
    assert fixed.candidates["image_2"] == tuple(everywhere[:50])
    among = set(default.candidates["text_1"])
    assert default.candidates["image_2"] == tuple([d for d in everywhere if d in among][:50])
    for res in (fixed, default):
        assert res.ids[0] == gold["id"]
        assert list(res.ids) == contract_order(res, ["text_1", "image_2"])[:10]


@pytest.mark.parametrize("mode", ["dense", "sparse", "fuse"])
def test_modes(engine: Engine, mode: str) -> None:
    gold = doc(engine, 2)
    phrase = gold["review"].split(". ")[0]
    p = prog("SELECT id FROM products WHERE id IN <text_1>", text("review", phrase, mode=mode, k=10))
    res = engine.execute(p, k=50)
    dense = dense_oracle(engine, "review", phrase, 10)
    sparse = sparse_oracle(engine, "review", phrase, 10)
    expected = {
        "dense": dense,
        "sparse": [d for d, _ in sparse],
        "fuse": [d for d, _ in rrf_fuse([[(d, 0.0) for d in dense], sparse], 10)],
    }[mode]
    assert list(res.candidates["text_1"]) == expected
    assert set(res.ids) == set(expected)


def test_rerank_reorders_or_cuts_never_adds(engine: Engine) -> None:
    gold = doc(engine, 30)
    phrase = gold["review"].split(". ")[0]
    recall = engine.execute(
        prog("SELECT id FROM products WHERE id IN <text_1>", text("review", phrase, mode="fuse", k=20))
    )
    res = engine.execute(
        prog(
            "SELECT id FROM products WHERE id IN <text_1>",
            text("review", phrase, mode="fuse", k=20, rerank=5),
        )
    )
    recalled, kept = recall.candidates["text_1"], res.candidates["text_1"]
    assert len(kept) == min(5, len(recalled)) and set(kept) <= set(recalled)
    # The default reranker orders the recalled documents by cosine with the query.
    qv = engine.handle.embedder("review").embed([phrase])[0]
    stored = engine.handle.vectors.fetch_vectors(engine.handle.collection, "review", list(recalled))
    by_cosine = sorted(recalled, key=lambda d: (-float(np.dot(stored[d], qv)), d))
    assert list(kept) == by_cosine[:5]


class _Greedy:
    """A plugged-in reranker that tries to add a document and repeat one; the engine must refuse both."""

    name = "greedy"

    def rerank(self, requests: Sequence[RerankRequest]) -> list[list[Hit]]:
        return [[("P99999", 9.0), *reversed(r.hits), r.hits[0]] if r.hits else [] for r in requests]


def test_a_plugged_reranker_cannot_add(engine: Engine) -> None:
    gold = doc(engine, 31)
    p = prog("SELECT id FROM products WHERE id IN <text_1>", text("review", gold["review"], k=10, rerank=3))
    res = Engine(engine.handle, reranker=_Greedy()).execute(p)
    recalled = dense_oracle(engine, "review", gold["review"], 10)
    assert list(res.candidates["text_1"]) == list(reversed(recalled))[:3]


def test_order_by_overrides_the_contract(engine: Engine) -> None:
    gold = doc(engine, 12)
    p = prog(
        "SELECT id FROM products WHERE id IN <text_1> ORDER BY price DESC, id",
        text("review", gold["review"], k=20),
    )
    res = engine.execute(p, k=8)
    cands = ", ".join(q(d) for d in res.candidates["text_1"])
    rows = engine.handle.sql.query(
        f"SELECT id FROM {engine.handle.table} WHERE id IN ({cands}) ORDER BY price DESC, id LIMIT 8"
    )
    assert list(res.ids) == [str(r[0]) for r in rows]


def test_limit_without_order_by_is_ranked_by_the_contract(engine: Engine) -> None:
    gold = doc(engine, 12)
    p = prog("SELECT id FROM products WHERE id IN <text_1> LIMIT 5", text("review", gold["review"], k=20))
    res = engine.execute(p)
    assert len(res.ids) == 5 and list(res.ids) == contract_order(res, ["text_1"])


def test_empty_candidate_sets(engine: Engine) -> None:
    gold = doc(engine, 1)
    brand = q(gold["brand"])
    nothing = text("review", "zqxjv wvkqz", mode="sparse")
    res_in = engine.execute(
        prog(f"SELECT id FROM products WHERE brand = {brand} AND id IN <text_1>", nothing)
    )
    res_out = engine.execute(
        prog(f"SELECT id FROM products WHERE brand = {brand} AND id NOT IN <text_1>", nothing), k=100
    )
    assert res_in.candidates["text_1"] == () and res_in.ids == ()
    assert set(res_out.ids) == ids_where(engine, f"brand = {brand}")


def test_k_bounds_the_result(engine: Engine) -> None:
    p = prog("SELECT id FROM products WHERE price > 0")
    assert len(engine.execute(p, k=7).ids) == 7
    assert list(engine.execute(p, k=7).ids) == sorted(ids_where(engine, "price > 0"))[:7]


def test_a_brand_with_a_quote_is_a_literal(engine: Engine) -> None:
    res = engine.execute(
        prog("SELECT id FROM products WHERE brand = 'Levi''s' OR brand = 'x'' OR 1=1 --'"), k=1000
    )
    assert set(res.ids) == ids_where(engine, "brand = 'Levi''s'")


def test_emails(small_index_cfg: Config) -> None:
    e = Engine.open(small_index_cfg, "email")
    try:
        row = e.handle.sql.query(
            f"SELECT id, sender, subject FROM {e.handle.table} ORDER BY id LIMIT 1 OFFSET 4"
        )[0]
        p = prog(
            f"SELECT id FROM emails WHERE sender = {q(row[1])} AND date >= toDateTime('2000-01-01 00:00:00') AND id IN <text_1>",
            text("subject", row[2]),
        )
        res = e.execute(p, k=50)
        assert row[0] in res.ids
        assert set(res.ids) == ids_where(e, f"sender = {q(row[1])}") & set(res.candidates["text_1"])
    finally:
        e.close()


def test_limits_are_enforced_and_a_program_over_them_fails_alone(engine: Engine) -> None:
    everything = prog("SELECT id FROM products WHERE price > 0")
    few = prog("SELECT id FROM products WHERE id IN <text_1>", text("title", "wireless headphones", k=3))
    tight = Engine(engine.handle, limits=ExecutionLimits(max_result_rows=5))
    with pytest.raises(ExecutionError) as info:
        tight.execute(everything)
    assert info.value.code == "exec_limit"
    out = tight.execute_many([few, everything, few])
    assert isinstance(out[1], ExecutionError) and out[1].code == "exec_limit"
    assert isinstance(out[0], ExecutionResult) and out[0] == out[2] and len(out[0].ids) <= 3
    scan_cap = Engine(engine.handle, limits=ExecutionLimits(max_rows_to_read=100))
    with pytest.raises(ExecutionError) as info:
        scan_cap.execute(everything)
    assert info.value.code == "exec_limit"
    assert "\n" not in info.value.one_line()


def test_a_result_and_its_prepared_program_carry_no_dead_state(engine: Engine) -> None:
    gold = doc(engine, 8)
    p = prog(
        f"SELECT id FROM products WHERE brand = {q(gold['brand'])} AND id IN <text_1> ORDER BY price LIMIT 3",
        text("review", gold["review"]),
    )
    res = engine.execute(p, k=5)
    # Only a program that ran has a result, so a result says nothing about success.
    assert set(res.to_dict()) == {"ids", "scores", "candidates", "sql", "timings"}
    prepared = engine.prepare(p)
    assert not hasattr(prepared.validated, "limit")
    assert prepared.positive == prepared.validated.positive_entries == (0,)
    assert prepared.ordered and not prepared.plain and prepared.names == ("text_1",)


def test_candidates_are_named_by_their_placeholders(engine: Engine) -> None:
    p = prog(
        "SELECT id FROM products WHERE id IN <text_1> AND id NOT IN <image_2>",
        text("review", "long battery life", k=10),
        image("bright red", k=5),
    )
    res = engine.execute(p)
    names = [candidate_name(i, e) for i, e in enumerate(p.retrieval_list)]
    assert names == ["text_1", "image_2"] and list(res.candidates) == names
    assert [f"<{n}>" for n in names] == [Program.placeholder(i, e) for i, e in enumerate(p.retrieval_list)]
