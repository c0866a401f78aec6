"""Baselines on the real engines (chDB, Milvus Lite, MiniLM) over the session's small corpora.

Instances here are built from programs written against the corpus: the gold id of each is what
its gold program ranks first, as the benchmark's rank-1 filter guarantees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

import pytest

from indexing.config import Config
from rl.eval.errors import OracleMismatch
from rl.eval.methods import MethodContext, get_method
from rl.eval.runner import evaluate
from serving.dsl import parse_program
from serving.query_parser import Condition
from serving.self_query import load_vocabulary, milvus_filter, vocabulary_fields
from tests.rl.eval_support import Inst

K = 10


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@pytest.fixture(scope="module")
def ctx(small_index_cfg: Config) -> Iterator[MethodContext]:
    context = MethodContext(small_index_cfg, "ecommerce")
    yield context
    context.close()


@pytest.fixture(scope="module")
def email_ctx(small_index_cfg: Config) -> Iterator[MethodContext]:
    context = MethodContext(small_index_cfg, "email")
    yield context
    context.close()


def _rows(ctx: MethodContext, sql: str) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = ctx.index.sql.query(sql)
    return rows


@pytest.fixture(scope="module")
def instances(ctx: MethodContext) -> list[Inst]:
    """Brand + title programs for a spread of products; the gold is what each program ranks first."""
    docs = _rows(ctx, f"SELECT id, brand, title FROM {ctx.index.table} ORDER BY cityHash64(id) LIMIT 12")
    out = []
    for i, (doc_id, brand, title) in enumerate(docs):
        program = json.dumps(
            {
                "sql": f"SELECT id FROM products WHERE brand = {_quote(brand)} AND id IN <text_1>",
                "retrieval_list": [{"type": "text", "field": "title", "query": title}],
            }
        )
        result = ctx.engine.execute(parse_program(program), K)
        assert result.ids, f"the program for {doc_id} found nothing"
        out.append(
            Inst(f"t{i:02d}", f"{title} from {brand}", program, result.ids[0], "L2", ("structured", "text"))
        )
    return out


def _known_ids(ctx: MethodContext) -> set[str]:
    return {r[0] for r in _rows(ctx, f"SELECT id FROM {ctx.index.table}")}


@pytest.mark.parametrize("method", ["bm25", "dense", "rrf", "self-query"])
def test_retrieval_baselines_rank_known_ids(
    ctx: MethodContext, small_index_cfg: Config, instances: list[Inst], method: str
) -> None:
    run = evaluate(small_index_cfg, "ecommerce", method, instances, k=K, progress=False, ctx=ctx)
    known = _known_ids(ctx)
    assert len(run.results) == len(instances)
    for r in run.results:
        assert r.error is None, r.error
        assert 0 < len(r.ids) <= K and len(set(r.ids)) == len(r.ids)
        assert set(r.ids) <= known
    # Every request names the gold's own title, and the gold's title ranks it first on that field;
    # a text retriever should find most of them in its top K.
    found = sum(r.rank is not None for r in run.results)
    assert found >= len(instances) // 2, (method, found)


def test_bm25_fuses_fields_deterministically(ctx: MethodContext, instances: list[Inst]) -> None:
    spec = get_method("bm25")
    first = spec.run(ctx, instances[:4], K)
    again = spec.run(ctx, instances[:4], K)
    assert first == again


def test_oracle_scores_one(ctx: MethodContext, small_index_cfg: Config, instances: list[Inst]) -> None:
    run = evaluate(small_index_cfg, "ecommerce", "oracle", instances, k=K, progress=False, ctx=ctx)
    assert run.uses_gold
    assert all(r.scores["hit@1"] == 1.0 for r in run.results)


def test_oracle_mismatch_names_the_query(
    ctx: MethodContext, small_index_cfg: Config, instances: list[Inst]
) -> None:
    other = next(i.gold_id for i in instances if i.gold_id != instances[0].gold_id)
    broken = [replace(instances[0], gold_id=other), *instances[1:]]
    with pytest.raises(OracleMismatch) as err:
        evaluate(small_index_cfg, "ecommerce", "oracle", broken, k=K, progress=False, ctx=ctx)
    assert err.value.code == "oracle_mismatch"
    assert instances[0].qid in err.value.one_line() and f"got {instances[0].gold_id}" in err.value.one_line()


def test_sql_only_ranks_the_structured_result_by_id(
    ctx: MethodContext, small_index_cfg: Config, instances: list[Inst]
) -> None:
    run = evaluate(small_index_cfg, "ecommerce", "sql-only", instances[:3], k=K, progress=False, ctx=ctx)
    for inst, r in zip(instances[:3], run.results, strict=True):
        brand = _rows(ctx, f"SELECT brand FROM {ctx.index.table} WHERE id = {_quote(inst.gold_id)}")[0][0]
        expected = sorted(
            row[0] for row in _rows(ctx, f"SELECT id FROM {ctx.index.table} WHERE brand = {_quote(brand)}")
        )
        assert list(r.ids) == expected[:K]


def test_vocabulary_comes_from_the_table(ctx: MethodContext) -> None:
    vocab = load_vocabulary(ctx.index, ctx.schema)
    assert set(vocab.values) == set(vocabulary_fields(ctx.schema))
    brands = {r[0] for r in _rows(ctx, f"SELECT DISTINCT brand FROM {ctx.index.table}")}
    assert set(vocab.values["brand"]) == brands


def _epoch(d: date) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp())


def test_self_query_filter_restricts_milvus_results(ctx: MethodContext) -> None:
    from rl.baselines.fusion import dense_rankings
    from serving.query_parser import parse_query

    table = ctx.index.table
    brand, median_price = _rows(
        ctx,
        f"SELECT brand, quantileExact(0.5)(price) FROM {table} GROUP BY brand ORDER BY count() DESC, brand LIMIT 1",
    )[0]
    limit = int(median_price) + 1
    vocab = load_vocabulary(ctx.index, ctx.schema)
    parsed = parse_query(
        f"{brand} products under ${limit} released after 2020 with a sturdy feel", ctx.schema, vocab
    )
    assert {Condition("brand", "==", brand), Condition("price", "<", float(limit)),
            Condition("release_date", ">=", date(2021, 1, 1))} <= set(parsed.conditions)  # fmt: skip
    expr = milvus_filter(parsed.conditions, ctx.schema)
    assert expr is not None and f"release_date >= {_epoch(date(2021, 1, 1))}" in expr
    allowed = {
        r[0]
        for r in _rows(
            ctx,
            f"SELECT id FROM {table} WHERE brand = {_quote(brand)} AND price < {limit} AND release_date >= '2021-01-01'",
        )
    }
    assert allowed, "the sample filter should match some products"
    filtered = [doc for doc, _ in dense_rankings(ctx, [parsed.query], 20, filter=expr)[0]]
    assert filtered and set(filtered) <= allowed
    assert len(filtered) == min(20, len(allowed))
    unfiltered = [doc for doc, _ in dense_rankings(ctx, [parsed.query], 20)[0]]
    assert not set(unfiltered) <= allowed  # without the filter other products come back


def test_self_query_email_flags_and_domain(email_ctx: MethodContext) -> None:
    from rl.baselines.fusion import dense_rankings
    from serving.query_parser import parse_query

    table = email_ctx.index.table
    domain = _rows(
        email_ctx, f"SELECT sender_domain FROM {table} GROUP BY sender_domain ORDER BY count() DESC LIMIT 1"
    )[0][0]
    vocab = load_vocabulary(email_ctx.index, email_ctx.schema)
    parsed = parse_query(f"unread emails from someone at {domain} about the budget", email_ctx.schema, vocab)
    assert {Condition("sender_domain", "==", domain), Condition("is_read", "==", False)} <= set(
        parsed.conditions
    )
    expr = milvus_filter(parsed.conditions, email_ctx.schema)
    hits = [doc for doc, _ in dense_rankings(email_ctx, [parsed.query], 20, filter=expr)[0]]
    allowed = {
        r[0]
        for r in _rows(
            email_ctx, f"SELECT id FROM {table} WHERE sender_domain = {_quote(domain)} AND NOT is_read"
        )
    }
    assert hits and set(hits) <= allowed


def test_a_gold_program_that_fails_validation_counts_in_the_validation_layer(
    ctx: MethodContext, small_index_cfg: Config, instances: list[Inst]
) -> None:
    from rl.eval.report import failure_breakdown

    bad = json.dumps({"sql": "SELECT id FROM products WHERE colour = 'red'", "retrieval_list": []})
    run = evaluate(small_index_cfg, "ecommerce", "sql-only", [replace(instances[0], program=bad), instances[1]],
                   k=K, progress=False, ctx=ctx)  # fmt: skip
    failed, ran = run.results
    assert (
        failed.layer == "validation" and failed.error is not None and failed.error.startswith("validation ")
    )
    assert ran.layer is None and ran.error is None
    assert (
        failure_breakdown(run.results)["validation"] == 1 and failure_breakdown(run.results)["execution"] == 0
    )
