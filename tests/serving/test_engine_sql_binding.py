"""Id sets as bound query parameters or as SQL literals (``serving.sql.ids``): the same answers, errors,
caching and batching either way, and ``id IN <ids>`` read through the primary key."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

from core.errors import ProReError
from indexing.build import build_index
from indexing.config import Config
from serving.dsl import Program, Retrieval, parse_program
from serving.engine import DeadlineExceeded, Engine, ExecutionResult
from serving.settings import ServingSettings, SqlSettings

IdsMode = Literal["bound", "literal"]
"""The values of :attr:`SqlSettings.ids`."""
MODES: tuple[IdsMode, ...] = ("bound", "literal")


@pytest.fixture(scope="module")
def engines(small_index_cfg: Config) -> Iterator[dict[str, Engine]]:
    opened: dict[str, Engine] = {
        mode: Engine.open(small_index_cfg, "ecommerce", sql_settings=SqlSettings(ids=mode)) for mode in MODES
    }
    yield opened
    for engine in opened.values():
        engine.close()


def _docs(engine: Engine, n: int) -> list[dict[str, Any]]:
    cols = ["id", "brand", "category", "price", "review", "image"]
    rows = engine.handle.sql.query(
        f"SELECT {', '.join(cols)} FROM {engine.handle.table} ORDER BY id LIMIT {n} OFFSET 30"
    )
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _batch(engine: Engine) -> list[Program]:
    """Plain filters (one filter scan), ordered programs (one union), shared and empty id sets, a program
    that ClickHouse refuses, and repeats."""
    raw: list[dict[str, Any]] = []
    for d in _docs(engine, 6):
        phrase = " ".join(d["review"].split()[:5])
        raw.append({
            "sql": f"SELECT DISTINCT id FROM products WHERE price <= {d['price']} AND id IN <text_1>",
            "retrieval_list": [{"type": "text", "field": "review", "query": phrase, "k": 20}],
        })  # fmt: skip
        raw.append({
            "sql": f"SELECT id FROM products WHERE category = {_lit(d['category'])} AND id NOT IN <image_1> "
                   "AND id IN (SELECT id FROM products WHERE id IN <text_2>) ORDER BY rating DESC, id LIMIT 7",
            "retrieval_list": [{"type": "image", "field": "image", "query": d["image"], "k": 5},
                               {"type": "text", "field": "review", "query": phrase, "k": 50}],
        })  # fmt: skip
    # A BM25 search for words no document holds finds nothing: an empty id set (literals: FALSE,
    # bound: an empty array), under IN and under NOT IN.
    nothing = {"type": "text", "field": "review", "query": "qzxv wqpj", "mode": "sparse"}
    raw.append({"sql": "SELECT id FROM products WHERE id IN <text_1>", "retrieval_list": [nothing]})
    raw.append({
        "sql": "SELECT id FROM products WHERE price < 30 AND id NOT IN <text_1> ORDER BY id LIMIT 5",
        "retrieval_list": [nothing],
    })  # fmt: skip
    raw.append({
        "sql": "SELECT id FROM products WHERE price < 'cheap' AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "review", "query": "sturdy"}],
    })  # fmt: skip
    raw += raw[:3]
    return [parse_program(r) for r in raw]


def _outcome(o: ExecutionResult | ProReError) -> tuple[Any, ...]:
    if isinstance(o, ProReError):
        return ("error", type(o).__name__, o.code)
    return ("ok", o.ids, o.scores, dict(o.candidates))


def test_both_modes_answer_alike_alone_and_batched(engines: dict[str, Engine]) -> None:
    batch = _batch(engines["bound"])
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for mode, engine in engines.items():
        engine.clear_caches()
        alone = []
        for program in batch:
            try:
                alone.append(_outcome(engine.execute(program)))
            except ProReError as exc:
                alone.append(_outcome(exc))
        engine.clear_caches()
        before = engine.stats().sql_calls
        batched = [_outcome(o) for o in engine.execute_many(batch)]
        assert batched == alone, mode
        # One scan and one union, plus the refused statement isolated by halving; never one call each.
        assert engine.stats().sql_calls - before < len(batch) // 2
        answers[mode] = alone
    assert answers["bound"] == answers["literal"]
    assert sum(a[0] == "ok" and bool(a[1]) for a in answers["bound"]) >= 8
    assert ("error", "ExecutionError", "exec_failed") in answers["bound"]
    empty, negated = answers["bound"][12:14]
    assert empty[0] == negated[0] == "ok" and empty[3] == negated[3] == {"text_1": ()}
    assert not empty[1] and len(negated[1]) == 5


def test_bound_sql_names_its_parameters_and_holds_no_ids(engines: dict[str, Engine]) -> None:
    program = _batch(engines["bound"])[1]
    bound, literal = (engines[m].execute(program) for m in MODES)
    assert (bound.ids, bound.scores, bound.candidates) == (literal.ids, literal.scores, literal.candidates)
    assert "id IN {text_2: Array(String)}" in bound.sql and "{image_1: Array(String)}" in bound.sql
    assert not any(doc in bound.sql for ids in bound.candidates.values() for doc in ids)
    assert "{" not in literal.sql and all(_lit(doc) in literal.sql for doc in literal.candidates["text_2"])
    for result in (bound, literal):
        assert result.timings["sql"] > 0 and result.timings["total"] >= result.timings["sql"]


def test_one_statement_with_other_ids_is_not_answered_from_the_cache(engines: dict[str, Engine]) -> None:
    sql = "SELECT id FROM products WHERE id IN <text_1>"
    first = Program(sql, (Retrieval("text", "review", "sturdy build, would buy again", k=5),))
    second = Program(sql, (Retrieval("text", "review", "faded after one wash", k=5),))
    engine = engines["bound"]
    engine.clear_caches()
    a, b = engine.execute(first), engine.execute(second)
    assert a.sql == b.sql  # one rendered statement for both: the id sets differ only in what is bound
    assert a.candidates["text_1"] != b.candidates["text_1"]
    assert set(a.ids) == set(a.candidates["text_1"]) and set(b.ids) == set(b.candidates["text_1"])
    assert engine.cache_stats()["jobs"]["size"] == 1  # one template for the program's SQL
    assert engine.execute(first) == a and engine.cache_stats()["sql"]["hits"] >= 1


def test_deadlines_hold_with_bound_ids(engines: dict[str, Engine]) -> None:
    program = _batch(engines["bound"])[0]
    engines["bound"].clear_caches()
    with pytest.raises(DeadlineExceeded):
        engines["bound"].execute(program, timeout_s=0)


def test_the_setting_comes_from_the_serving_section(small_index_cfg: Config) -> None:
    cfg = small_index_cfg.with_section(ServingSettings(sql=SqlSettings(ids="literal")))
    with Engine.open(cfg, "ecommerce") as literal, Engine.open(small_index_cfg, "ecommerce") as default:
        assert literal.sql_settings.ids == "literal" and default.sql_settings.ids == "bound"


@pytest.fixture(scope="module")
def fine_grained(
    workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., dict[str, Any]]
) -> Config:
    """600 products in 16-row granules (hashing vectors: fast to build)."""
    base = workspace_config("pk", text="hashing", image="hashing", hashing_dim=64)
    cfg = base.replace(clickhouse=dataclasses.replace(base.clickhouse, index_granularity=16))
    write_synthetic_corpus(cfg, "ecommerce", 600)
    build_index(cfg, "ecommerce", progress=False)
    return cfg


@pytest.mark.parametrize("mode", MODES)
def test_id_in_reads_only_the_granules_of_its_ids(fine_grained: Config, mode: IdsMode) -> None:
    k = 5
    program = Program(
        "SELECT id FROM products WHERE rating >= 1 AND id IN <text_1>",
        (Retrieval("text", "review", "sturdy build", k=k),),
    )
    with Engine.open(fine_grained, "ecommerce", sql_settings=SqlSettings(ids=mode)) as engine:
        result = engine.execute(program)
        store, table = engine.handle.sql, engine.handle.table
        rows = store.count(table)
        params = {name: list(ids) for name, ids in result.candidates.items()} if mode == "bound" else None
        read = store.estimate_rows(result.sql, params=params)
        full = store.estimate_rows(f"SELECT id FROM {table} WHERE rating >= 1")
    assert rows == 600 and full == rows
    # Each id lies in one granule, so the primary key leaves at most k granules of 16 rows to read.
    assert 0 < read <= k * 16 < rows
