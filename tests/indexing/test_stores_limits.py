"""Limits that do not trust the program validator: what the stores themselves enforce on untrusted SQL.

chDB: the caps are settings of the session, set before an untrusted query and lifted before the project's
own statements; ``readonly`` goes with the statement, which the store first checks holds nothing that could
override or cut it off. clickhouse-connect: the caps and ``readonly`` are the request's settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("clickhouse_connect", reason="needs the clickhouse extra")

from indexing.config import ClickHouseConfig
from indexing.errors import StoreError
from indexing.stores.clickhouse import ChdbStore, ClickHouseServerStore, QueryLimits, limit_settings

CFG = ClickHouseConfig(database="stores_limits", max_rows_to_read=50, max_result_rows=1000)


@pytest.fixture(params=["chdb", "clickhouse-connect"])
def store(request: pytest.FixtureRequest, chdb_path: Path) -> Any:
    if request.param == "chdb":
        return ChdbStore(chdb_path, CFG)
    return ClickHouseServerStore(f"chdb://{chdb_path.resolve()}", CFG)


@pytest.fixture
def table(store: Any) -> str:
    name = "stores_limits.hundred"
    store.ensure_database("stores_limits")
    store.command(f"DROP TABLE IF EXISTS {name} SYNC")
    store.command(f"CREATE TABLE {name} (id String) ENGINE = MergeTree ORDER BY id")
    store.command(f"INSERT INTO {name} SELECT toString(number) FROM numbers(100)")
    return name


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 SETTINGS readonly = 0",
        "SELECT 1 SETTINGS max_rows_to_read = 0",
        "SELECT id FROM (SELECT '1' AS id SETTINGS readonly = 0)",
        "SELECT 1 FORMAT TSV",
        "SELECT 1 INTO OUTFILE 'x'",
        "SELECT 1; SELECT 2",
        "SELECT 1 /* an unclosed comment swallows what follows",
        "SELECT 1 -- a comment",
        "SELECT 'an unclosed literal",
        "SELECT $$heredoc$$",
    ],
)
def test_untrusted_sql_that_could_override_its_limits_is_refused(store: Any, sql: str) -> None:
    with pytest.raises(StoreError) as info:
        store.query(sql)
    assert info.value.code == "sql_readonly"
    assert "\n" not in str(info.value)


def test_words_inside_literals_and_quoted_names_are_not_clauses(store: Any) -> None:
    rows = store.query("SELECT 'SETTINGS readonly = 0; -- /*' AS `into`, 'it''s' AS b")
    assert rows == [("SETTINGS readonly = 0; -- /*", "it's")]


def test_untrusted_queries_run_read_only_under_the_configured_caps(store: Any, table: str) -> None:
    assert store.query("SELECT getSetting('readonly')") == [(1,)]
    assert store.query("SELECT getSetting('max_rows_to_read')") == [(50,)]
    with pytest.raises(StoreError) as info:
        store.query(f"SELECT id FROM {table}")
    assert info.value.code == "sql_limit"


def test_the_project_s_own_statements_run_without_the_caps(store: Any, table: str) -> None:
    store.query("SELECT 1")  # the session now carries the caps ...
    assert store.count(table) == 100  # ... which the trusted path lifts
    assert int(store._trusted("SELECT getSetting('max_rows_to_read')")[0][0]) == 0
    assert int(store._trusted("SELECT getSetting('readonly')")[0][0]) == 0


def test_chdb_caps_are_session_settings_not_query_text(chdb_path: Path) -> None:
    """The caps hold on the session even for a statement that names none of them."""
    store = ChdbStore(chdb_path, CFG)
    store.query("SELECT 1", settings={"max_result_rows": 7})
    assert store.query("SELECT getSetting('max_result_rows')", settings={"max_result_rows": 7}) == [(7,)]
    assert store.query("SELECT getSetting('max_result_rows')") == [(1000,)]


def test_one_definition_of_the_caps() -> None:
    limits = QueryLimits.from_config(CFG)
    assert limits.max_rows_to_read == 50 and limits.max_result_rows == 1000
    assert limit_settings(CFG) == limits.settings()
    assert list(limits.settings())[-1] == "readonly"
    assert limits.settings(programs=5000)["max_result_rows"] == 5000


def test_nullable_fields_get_nullable_columns() -> None:
    import dataclasses

    from indexing.schema import PRODUCTS
    from indexing.stores.clickhouse import create_table_sql

    fields = tuple(
        dataclasses.replace(f, nullable=True) if f.name == "rating" else f for f in PRODUCTS.fields
    )
    schema = dataclasses.replace(PRODUCTS, fields=fields)
    ddl = create_table_sql(schema, "db.t")
    assert "`rating` Nullable(Float64)" in ddl and "`price` Float64" in ddl
