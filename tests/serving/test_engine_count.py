"""``count_many``: many conditions counted in one scan, each equal to its own ``count()``; a failing
condition fails alone (real chDB)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

pytest.importorskip("chdb", reason="needs the clickhouse extra")

import indexing.stores.clickhouse_faults as faults
from indexing.config import Config
from indexing.errors import StoreFailure
from serving.dsl import parse_program, strip_retrievals, validate
from serving.engine import Engine, ExecutionError
from serving.engine.count import RowCounter, count_many, count_statement

CONDITIONS = (
    "brand = 'Levi''s'",
    "price < 100 AND in_stock",
    "NOT (color = 'red' OR color = 'blue')",
    "toYear(release_date) >= 2022",
    "id IN (SELECT id FROM products WHERE rating > 4)",
    "1",
)


@pytest.fixture(scope="module")
def engine(
    workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> Iterator[Engine]:
    from indexing.build import build_index

    cfg = workspace_config("count", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "ecommerce", 240)
    build_index(cfg, "ecommerce", progress=False)
    e = Engine.open(cfg, "ecommerce")
    yield e
    e.close()


def _condition(engine: Engine, where: str) -> exp.Expr:
    """The WHERE of a validated program, with its tables named as substitution renders them."""
    validated = validate(
        parse_program({"sql": f"SELECT id FROM products WHERE {where}", "retrieval_list": []}), engine.schema
    )
    cond = sqlglot.parse_one(strip_retrievals(validated, table=engine.handle.table), read="clickhouse").args[
        "where"
    ]
    assert isinstance(cond, exp.Where) and isinstance(cond.this, exp.Expr)
    return cond.this


def _oracle(engine: Engine, where: str) -> int:
    """The test's own SQL: one count() per condition."""
    sql = f"SELECT count() FROM {engine.handle.table} AS products WHERE {where.replace('FROM products', f'FROM {engine.handle.table}')}"
    return int(engine.handle.sql.query(sql)[0][0])


def test_every_count_equals_its_own_count_query(engine: Engine) -> None:
    got = count_many(engine, [_condition(engine, w) for w in CONDITIONS])
    want = [_oracle(engine, w) for w in CONDITIONS]
    assert got == want
    assert want[-1] == engine.handle.rows and 0 < want[1] < want[-1]  # the conditions do select


def test_one_scan_per_batch(engine: Engine) -> None:
    conds = [_condition(engine, w) for w in CONDITIONS] * 5

    def query(sql: str, settings: dict[str, Any]) -> list[tuple[Any, ...]]:
        assert settings["readonly"] == 1 and settings["max_rows_to_read"] == engine.limits.max_rows_to_read
        rows: list[tuple[Any, ...]] = engine.handle.sql.query(sql, settings=settings)
        return rows

    counter = RowCounter(query, engine.handle.table, engine.schema.table, engine.limits, batch=8)
    got = counter.count_many(conds)
    assert counter.calls == 4  # 30 conditions in batches of 8
    assert got == count_many(engine, [_condition(engine, w) for w in CONDITIONS]) * 5
    assert counter.count_many([]) == [] and counter.calls == 4


def test_a_failing_condition_fails_alone(engine: Engine) -> None:
    good = [_condition(engine, w) for w in CONDITIONS[:3]]
    bad = sqlglot.parse_one("toInt64(brand) = 1", read="clickhouse")  # brand is no number: fails at run time
    got = count_many(engine, [good[0], bad, *good[1:]])
    assert isinstance(got[1], ExecutionError) and got[1].code == "exec_failed"
    assert [got[0], *got[2:]] == [_oracle(engine, w) for w in CONDITIONS[:3]]


@pytest.mark.parametrize("classified", [True, False], ids=["listed-codes", "unknown-codes"])
def test_conditions_clickhouse_refuses_fail_alone_under_any_code(
    engine: Engine, classified: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not classified:  # ClickHouse's refusals reach the counter unclassified, as a new code would
        monkeypatch.setattr(faults, "STATEMENT_FAULTS", faults.LIMIT_FAULTS)
    good = [_condition(engine, w) for w in CONDITIONS]
    bad = [
        sqlglot.parse_one(sql.replace("FROM products", f"FROM {engine.handle.table}"), read="clickhouse")
        for sql in (
            "id IN (SELECT id, brand FROM products)",  # 20
            "lower(brand ORDER BY brand) = 'x'",  # 62
            "toInt64(brand) = 1",  # 6
        )
    ]
    conds = [c for pair in zip(good, bad * 2, strict=False) for c in pair]
    got = count_many(engine, conds)
    for c, n in zip(conds, got, strict=True):
        if any(c is b for b in bad):
            assert isinstance(n, ExecutionError) and n.code == "exec_failed"
        else:
            assert n == _oracle(engine, CONDITIONS[good.index(c)])


def test_the_statement_is_a_tree_and_quotes_its_literals() -> None:
    cond = exp.EQ(this=exp.column("brand"), expression=exp.Literal.string("x') OR 1 = 1 OR ('"))
    sql = count_statement([cond], "prore.products__v0001", "products").sql(dialect="clickhouse")
    assert sql == (
        "SELECT countIf(brand = 'x'') OR 1 = 1 OR (''') AS n0 FROM prore.products__v0001 AS products"
    )


def test_a_dropped_table_fails_the_call_not_each_condition(engine: Engine) -> None:
    # A scratch copy of the corpus table, dropped before counting: no condition is at fault.
    table = f"{engine.handle.table.split('.')[0]}.count_scratch"
    engine.handle.sql.command(f"CREATE TABLE {table} AS {engine.handle.table}")
    engine.handle.sql.command(f"INSERT INTO {table} SELECT * FROM {engine.handle.table}")

    def query(sql: str, settings: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = engine.handle.sql.query(sql, settings=settings)
        return rows

    counter = RowCounter(query, table, engine.schema.table, engine.limits)
    conds = [_condition(engine, w) for w in CONDITIONS[:4]]
    assert counter.count_many(conds) == [_oracle(engine, w) for w in CONDITIONS[:4]]
    engine.handle.sql.drop_table(table)
    with pytest.raises(StoreFailure) as info:
        counter.count_many(conds)
    assert info.value.retryable and "UNKNOWN_TABLE" in info.value.message
    assert counter.calls == 2  # one scan, not split condition by condition
