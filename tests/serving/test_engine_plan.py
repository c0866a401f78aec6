"""The planning pass that flattens self-subqueries: where it applies, where it must not, and that the
flattened SQL returns exactly what the program's own SQL returns on the real table."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from core.errors import ProReError
from indexing.config import Config
from indexing.schema import PRODUCTS
from serving.dsl import Program, Retrieval, parse_program, substitute, validate
from serving.dsl.placeholders import placeholder_sites
from serving.engine import Engine
from serving.engine.plan import flatten_self_subqueries, is_plain_filter, stable_order
from tests.serving.strategies import programs


def select(sql: str) -> exp.Select:
    tree = sqlglot.parse_one(sql, read="clickhouse")
    assert isinstance(tree, exp.Select)
    return tree


def flat(sql: str) -> str:
    return flatten_self_subqueries(select(sql), "products").sql(dialect="clickhouse")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE rating > 4)",
            "SELECT id FROM products WHERE (rating > 4)",
        ),
        (
            "SELECT id FROM products WHERE a = 1 AND id NOT IN (SELECT DISTINCT id FROM products WHERE b LIKE 'x%' OR c = 2)",
            "SELECT id FROM products WHERE a = 1 AND NOT (b LIKE 'x%' OR c = 2)",
        ),
        (
            "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE x > 1 AND id IN (SELECT id FROM products WHERE y < 2))",
            "SELECT id FROM products WHERE (x > 1 AND (y < 2))",
        ),
        (
            "SELECT id FROM products WHERE products.id IN (SELECT id FROM products WHERE price * 2 BETWEEN 1 AND 9)",
            "SELECT id FROM products WHERE (price * 2 BETWEEN 1 AND 9)",
        ),
    ],
)
def test_flattens_exact_self_subqueries(sql: str, expected: str) -> None:
    assert flat(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE rating > 4 LIMIT 3)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE rating > 4 ORDER BY price)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products GROUP BY id HAVING count() > 1)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE toYear(release_date) = 2020)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE price > NULL)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE review_count % 2 = 0)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products AS p WHERE p.price > 1)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM emails WHERE x > 1)",
        "SELECT id FROM products WHERE brand IN (SELECT brand FROM products WHERE price > 1)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products)",
    ],
)
def test_leaves_everything_else_alone(sql: str) -> None:
    assert flat(sql) == sqlglot.parse_one(sql, read="clickhouse").sql(dialect="clickhouse")


def test_does_not_change_its_input() -> None:
    tree = select("SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE a > 1)")
    before = tree.sql()
    flatten_self_subqueries(tree, "products")
    assert tree.sql() == before


def test_placeholders_keep_their_polarity() -> None:
    program = Program(
        "SELECT id FROM products WHERE id NOT IN (SELECT id FROM products WHERE price < 50 AND id IN <text_1>) "
        "AND id IN (SELECT id FROM products WHERE id NOT IN <image_2> OR rating > 4)",
        (Retrieval("text", "review", "cheap"), Retrieval("image", "image", "red")),
    )
    validated = validate(program, PRODUCTS)
    plan = dataclasses.replace(validated, tree=flatten_self_subqueries(validated.tree, "products"))
    assert "SELECT" not in plan.tree.args["where"].sql()
    before = sorted((u.entry, u.positive) for _, u in placeholder_sites(validated.tree.copy()))
    after = sorted((u.entry, u.positive) for _, u in placeholder_sites(plan.tree.copy()))
    assert before == after == [(0, False), (1, False)]
    assert is_plain_filter(plan.tree)


def stable(sql: str) -> str:
    return stable_order(select(sql)).sql(dialect="clickhouse")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT id FROM products WHERE a > 1 LIMIT 5",
            "SELECT id FROM products WHERE a > 1 ORDER BY id ASC LIMIT 5",
        ),
        (
            "SELECT DISTINCT id FROM products ORDER BY price DESC",
            "SELECT DISTINCT id FROM products ORDER BY price DESC, id ASC",
        ),
        (
            "SELECT id FROM products ORDER BY price, id DESC LIMIT 2",
            "SELECT id FROM products ORDER BY price, id DESC LIMIT 2",
        ),
        (
            "SELECT id FROM products WHERE id IN (SELECT id FROM products ORDER BY rating DESC LIMIT 10)",
            "SELECT id FROM products WHERE id IN (SELECT id FROM products ORDER BY rating DESC, id ASC LIMIT 10)",
        ),
        (
            "SELECT id FROM products WHERE brand IN (SELECT brand FROM products GROUP BY brand ORDER BY count() DESC LIMIT 3)",
            "SELECT id FROM products WHERE brand IN (SELECT brand FROM products GROUP BY brand ORDER BY count() DESC LIMIT 3)",
        ),
        ("SELECT id FROM products WHERE a > 1", "SELECT id FROM products WHERE a > 1"),
    ],
)
def test_stable_order_breaks_ties_by_id(sql: str, expected: str) -> None:
    assert stable(sql) == expected


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


@pytest.fixture(scope="module")
def corpus_ids(engine: Engine) -> list[str]:
    return [str(r[0]) for r in engine.handle.sql.query(f"SELECT id FROM {engine.handle.table}")]


Rows = set[str] | tuple[str, str, int | None]


def run(engine: Engine, sql: str) -> Rows:
    """The ids ``sql`` returns, or what the store refused it with: error kind, code and ClickHouse's number."""
    try:
        return {str(r[0]) for r in engine.handle.sql.query(sql)}
    except ProReError as exc:
        return (type(exc).__name__, exc.code, getattr(exc, "number", None))


def wrapped(program: Program, negated: bool) -> Program:
    """The program's whole condition moved one self-subquery down (where the pass has most to do)."""
    where = program.sql.split(" WHERE ", 1)[1]
    op = "NOT IN" if negated else "IN"
    return Program(
        f"SELECT id FROM products WHERE id {op} (SELECT id FROM products WHERE {where})",
        program.retrieval_list,
    )


EXAMPLES = 60


def test_flattened_sql_returns_the_same_rows(engine: Engine, corpus_ids: list[str]) -> None:
    ran: list[tuple[bool, bool]] = []  # (has a LIMIT, the plan changed the SQL) per example compared

    # Derandomized: the coverage check below (a LIMIT among the examples, and the pass changing at least a tenth
    # of them) is about this example set, not a draw; a random draw once changed only 4 of 60.
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    @given(program=programs(PRODUCTS), nest=st.sampled_from([None, False, True]))
    def check(program: Program, nest: bool | None) -> None:
        plain = " WHERE " in program.sql and not any(w in program.sql for w in (" ORDER BY ", " LIMIT "))
        if nest is not None and plain:
            program = wrapped(program, nest)
        validated = validate(program, PRODUCTS)
        rng = random.Random(program.sql)
        id_sets = {
            i: rng.sample(corpus_ids, rng.choice([0, 3, 20, 50])) for i in range(len(program.retrieval_list))
        }
        # With ids as the last sort key a LIMIT keeps the same rows in both forms, so those compare too.
        ordered = dataclasses.replace(validated, tree=stable_order(validated.tree))
        original = substitute(ordered, id_sets, table=engine.handle.table)
        plan = dataclasses.replace(ordered, tree=flatten_self_subqueries(ordered.tree, validated.table))
        flattened = substitute(plan, id_sets, table=engine.handle.table)
        assert run(engine, flattened) == run(engine, original), (original, flattened)
        ran.append(("LIMIT" in original, flattened != original))

    check()
    assert len(ran) >= EXAMPLES
    assert any(limit for limit, _ in ran) and sum(changed for _, changed in ran) >= EXAMPLES // 10, ran


NULLABLE_RATING = dataclasses.replace(
    PRODUCTS,
    fields=tuple(dataclasses.replace(f, nullable=True) if f.name == "rating" else f for f in PRODUCTS.fields),
)


def test_a_condition_on_a_nullable_column_stays_in_its_subquery() -> None:
    # With rating NULL, `id NOT IN (SELECT ... WHERE rating > 4)` keeps the row and `NOT (rating > 4)` does not.
    nullable = NULLABLE_RATING.nullable_fields
    assert nullable == {"rating"} and PRODUCTS.nullable_fields == frozenset()
    for sql in (
        "SELECT id FROM products WHERE id NOT IN (SELECT id FROM products WHERE rating > 4)",
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE price < 9 AND rating > 4)",
    ):
        tree = select(sql)
        assert flatten_self_subqueries(tree, "products", nullable).sql(dialect="clickhouse") == tree.sql(
            dialect="clickhouse"
        )
    mixed = select(
        "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE price < 9) "
        "AND id IN (SELECT id FROM products WHERE rating > 4)"
    )
    assert flatten_self_subqueries(mixed, "products", nullable).sql(dialect="clickhouse") == (
        "SELECT id FROM products WHERE (price < 9) AND id IN (SELECT id FROM products WHERE rating > 4)"
    )


def test_engine_runs_the_flattened_plan(engine: Engine) -> None:
    program: dict[str, Any] = {
        "sql": "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE price < 100 AND id IN <text_1>)",
        "retrieval_list": [{"type": "text", "field": "title", "query": "wireless headphones"}],
    }
    res = engine.execute(parse_program(program), k=50)
    assert res.sql.count("SELECT") == 1
    cands = set(res.candidates["text_1"])
    expected = {i for i in run(engine, f"SELECT id FROM {engine.handle.table} WHERE price < 100")} & cands
    assert set(res.ids) == expected
    assert parse_program(program).sql.count("SELECT") == 2
