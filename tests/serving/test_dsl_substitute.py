"""Substitution and the structure-only query as pure passes over the syntax tree."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from indexing.schema import PRODUCTS
from serving.dsl import DslError, Program, Retrieval, parse_program, strip_retrievals, substitute, validate
from serving.dsl.errors import Code
from serving.dsl.validate import ValidatedProgram

TEXT = Retrieval("text", "review", "quiet")
IMAGE = Retrieval("image", "image", "white")


def _validated(sql: str, *entries: Retrieval) -> ValidatedProgram:
    return validate(Program(sql, entries), PRODUCTS)


def test_ids_become_quoted_literals_never_pasted_text() -> None:
    v = _validated("SELECT id FROM products WHERE id IN <text_1>", TEXT)
    hostile_ids = ["P1", "P'2", "P\\3", "x') OR 1=1 --", "P4; DROP TABLE products"]
    sql = substitute(v, {0: hostile_ids}, table="products")
    tree = sqlglot.parse_one(sql, read="clickhouse")
    predicate = tree.find(exp.In)
    assert predicate is not None
    assert [lit.this for lit in predicate.expressions] == hostile_ids
    assert isinstance(tree, exp.Select) and len(sqlglot.parse(sql, read="clickhouse")) == 1


def test_empty_sets_become_constant_predicates() -> None:
    v = _validated("SELECT id FROM products WHERE id IN <text_1> OR id NOT IN <image_2>", TEXT, IMAGE)
    sql = substitute(v, {0: [], 1: []}, table="products")
    assert sql == "SELECT id FROM products AS products WHERE FALSE OR NOT FALSE"


def test_physical_table_replaces_every_reference_and_keeps_qualified_columns() -> None:
    v = _validated(
        "SELECT products.id FROM products WHERE products.price < (SELECT avg(price) FROM products) "
        "AND id IN (SELECT id FROM products WHERE id IN <text_1>)",
        TEXT,
    )
    sql = substitute(v, {0: ["P1"]}, table="prore.products__v0002")
    tables = list(sqlglot.parse_one(sql, read="clickhouse").find_all(exp.Table))
    assert len(tables) == 3
    assert {(t.db, t.name, t.alias) for t in tables} == {("prore", "products__v0002", "products")}
    assert "products.price" in sql


def test_substitute_leaves_the_validated_tree_alone() -> None:
    v = _validated("SELECT id FROM products WHERE id IN <text_1>", TEXT)
    before = v.tree.sql(dialect="clickhouse")
    substitute(v, {0: ["P1"]}, table="prore.t")
    strip_retrievals(v, table="prore.t")
    assert v.tree.sql(dialect="clickhouse") == before
    assert v.normalized_sql == "SELECT id FROM products WHERE id IN <text_1>"


def test_missing_or_malformed_id_sets_are_typed_errors() -> None:
    v = _validated("SELECT id FROM products WHERE id IN <text_1> AND id IN <image_2>", TEXT, IMAGE)
    with pytest.raises(DslError) as caught:
        substitute(v, {0: ["P1"]}, table="products")
    assert caught.value.code == Code.MISSING_ID_SET
    with pytest.raises(DslError):
        substitute(v, {0: "P1", 1: []}, table="products")
    with pytest.raises(DslError):
        substitute(v, {0: [1], 1: []}, table="products")  # type: ignore[list-item]


@pytest.mark.parametrize("table", ["", "a.b.c", "prore.products; DROP TABLE x", "1abc", "db.", "na me"])
def test_physical_table_must_be_a_plain_name(table: str) -> None:
    v = _validated("SELECT id FROM products")
    with pytest.raises(DslError) as caught:
        substitute(v, {}, table=table)
    assert caught.value.code == Code.BAD_PHYSICAL_TABLE


def test_strip_retrievals_lets_every_placeholder_predicate_pass() -> None:
    v = _validated(
        "SELECT id FROM products WHERE price < 5 AND id IN <text_1> AND NOT (id IN <image_2> OR rating < 2)",
        TEXT,
        IMAGE,
    )
    stripped = strip_retrievals(v)
    assert stripped == "SELECT id FROM products WHERE price < 5 AND TRUE AND NOT (FALSE OR rating < 2)"
    # The structure-only query is itself a program with no entries.
    again = validate(parse_program({"sql": stripped, "retrieval_list": []}), PRODUCTS)
    assert again.normalized_sql == stripped
    assert strip_retrievals(v, table="prore.p").startswith("SELECT id FROM prore.p AS products WHERE")


def test_substituted_sql_round_trips_for_any_program_and_any_ids() -> None:
    """What runs reads back as the validated tree with the ids in place: same id lists, no other statement."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests.serving.strategies import generated_programs

    ids = st.lists(st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s), max_size=6)

    @settings(max_examples=150, deadline=None)
    @given(generated=generated_programs(PRODUCTS), data=st.data())
    def check(generated: object, data: st.DataObject) -> None:
        v = validate(generated.program, PRODUCTS)  # type: ignore[attr-defined]
        id_sets = {i: data.draw(ids) for i in range(len(v.retrieval_list))}
        sql = substitute(v, id_sets, table="prore.products__v0001")
        statements = sqlglot.parse(sql, read="clickhouse")
        assert len(statements) == 1 and isinstance(statements[0], exp.Select)
        tree = statements[0]
        assert {t.name for t in tree.find_all(exp.Table)} == {"products__v0001"}
        assert tree.sql(dialect="clickhouse", comments=False) == sql
        written = {i for s in id_sets.values() for i in s}
        got = {lit.this for node in tree.find_all(exp.In) for lit in node.expressions if lit.is_string}
        assert written <= got

    check()
