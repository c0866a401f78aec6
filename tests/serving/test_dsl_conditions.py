"""Conditions that cannot be true or false are refused by validation, with their position, before they run.

Before, ``WHERE 'UTC'`` and the like reached ClickHouse and came back as an execution failure.
"""

from __future__ import annotations

import pytest

from indexing.schema import EMAILS, PRODUCTS, CorpusSchema
from serving.dsl import ValidationError
from serving.dsl.errors import Code
from serving.dsl.safety import check_sql


@pytest.mark.parametrize(
    ("sql", "at"),
    [
        ("SELECT id FROM products WHERE 'UTC'", "'UTC'"),
        ("SELECT id FROM products WHERE price", "price"),
        ("SELECT id FROM products WHERE in_stock AND NOT brand", "brand"),
        ("SELECT id FROM products WHERE price > 1 OR title", "title"),
        ("SELECT id FROM products WHERE toString(price)", "toString"),
        ("SELECT id FROM products WHERE lower(brand)", "lower"),
        ("SELECT id FROM products WHERE release_date", "release_date"),
        ("SELECT id FROM products WHERE CAST(price AS String)", "price"),
        ("SELECT id FROM products WHERE id IN (SELECT id FROM products GROUP BY id HAVING count())", "count"),
    ],
)
def test_non_boolean_conditions_are_refused_where_they_stand(sql: str, at: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_sql(sql, PRODUCTS)
    assert info.value.code == Code.NOT_BOOLEAN
    assert info.value.position is not None
    assert sql[info.value.position :].startswith(at), sql[info.value.position :]


@pytest.mark.parametrize(
    ("sql", "schema"),
    [
        ("SELECT id FROM products WHERE in_stock", PRODUCTS),
        ("SELECT id FROM products WHERE NOT in_stock AND price < 10", PRODUCTS),
        ("SELECT id FROM products WHERE 1", PRODUCTS),
        ("SELECT id FROM products WHERE notEmpty(brand)", PRODUCTS),
        ("SELECT id FROM products WHERE CAST(rating AS Bool)", PRODUCTS),
        ("SELECT id FROM products WHERE (price > 1) AND (id IN <text_1>)", PRODUCTS),
        ("SELECT id FROM emails WHERE is_read OR is_starred", EMAILS),
    ],
)
def test_truth_values_pass(sql: str, schema: CorpusSchema) -> None:
    check_sql(sql, schema)


@pytest.mark.parametrize(
    ("sql", "ok"),
    [
        ("SELECT id FROM emails WHERE date > '2001-05-01 10:00:00'", True),
        ("SELECT id FROM emails WHERE date > '2001-05-01'", True),
        ("SELECT id FROM emails WHERE toDate(date) = '2001-05-01'", True),
        ("SELECT id FROM emails WHERE date BETWEEN '2001-05-01' AND '2001-06-01 00:00:00'", True),
        ("SELECT id FROM emails WHERE sender = '2001-05'", True),  # a string column: any string
        ("SELECT id FROM emails WHERE date > '2001-05-01T10:00:00'", False),
        ("SELECT id FROM emails WHERE toDate(date) = '2001-05-01 10:00:00'", False),
        ("SELECT id FROM emails WHERE date IN ('2001-05-01', '2001-5-1')", False),
        ("SELECT id FROM emails WHERE '2001' < date", False),
    ],
)
def test_dates_are_written_as_the_grammar_writes_them(sql: str, ok: bool) -> None:
    if ok:
        check_sql(sql, EMAILS)
        return
    with pytest.raises(ValidationError) as info:
        check_sql(sql, EMAILS)
    assert info.value.code == "bad_date" and "YYYY-MM-DD" in info.value.message
