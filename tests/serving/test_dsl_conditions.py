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
