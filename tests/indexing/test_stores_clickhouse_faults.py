"""Whose fault a failed ClickHouse statement is: the statement's (QueryRejected), the store's (StoreFailure),
or unclassified (a StoreFailure the engine settles itself). Real refusals from chDB where ClickHouse gives
them on demand; the exception text of the others, as ClickHouse words it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")

from indexing.errors import QueryRejected, StoreFailure
from indexing.stores.clickhouse import ChdbStore
from indexing.stores.clickhouse_faults import LIMIT_FAULTS, STATEMENT_FAULTS, STORE_FAULTS, sql_error


def test_the_lists_do_not_overlap() -> None:
    assert LIMIT_FAULTS <= STATEMENT_FAULTS
    assert not STATEMENT_FAULTS & STORE_FAULTS


@pytest.mark.parametrize(
    ("sql", "number"),
    [
        ("SELECT 1 WHERE 1 IN (SELECT 1, 2)", 20),  # NUMBER_OF_COLUMNS_DOESNT_MATCH
        ("SELECT lowerDistinct('a')", 46),  # UNKNOWN_FUNCTION: what lower(DISTINCT x) becomes
        ("SELECT 1 WHERE 1 < 1e400", 62),  # SYNTAX_ERROR
        ("SELECT toIntervalDay('3.5')", 6),  # CANNOT_PARSE_TEXT
    ],
)
def test_what_a_statement_says_is_its_own_fault(chdb_path: Path, sql: str, number: int) -> None:
    with pytest.raises(QueryRejected) as info:
        ChdbStore(chdb_path).query(sql)
    assert info.value.number == number and not info.value.retryable


def test_a_missing_table_is_the_store_s(chdb_path: Path) -> None:
    with pytest.raises(StoreFailure) as info:
        ChdbStore(chdb_path).query("SELECT id FROM default.no_such_table_here")
    assert info.value.number == 60 and not info.value.unclassified and info.value.retryable


@pytest.mark.parametrize(
    ("text", "unclassified"),
    [
        ("Code: 49. DB::Exception: Bad cast from type A to B. (LOGICAL_ERROR) (version 25.8)", True),
        ("Code: 1234. DB::Exception: a code a later ClickHouse adds. (SOMETHING_NEW)", True),
        ("Code: 394. DB::Exception: Query was cancelled. (QUERY_WAS_CANCELLED)", False),
        (
            "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 9 GiB. (MEMORY_LIMIT_EXCEEDED)",
            False,
        ),
        ("chDB could not start", False),
    ],
)
def test_codes_of_no_list_are_unclassified(text: str, unclassified: bool) -> None:
    error = sql_error(RuntimeError(text))
    assert isinstance(error, StoreFailure) and error.retryable
    assert error.unclassified is unclassified and "\n" not in error.one_line()


def test_a_query_s_own_memory_cap_is_its_own() -> None:
    error = sql_error(
        RuntimeError("Code: 241. DB::Exception: Memory limit (for query) exceeded. (MEMORY_LIMIT_EXCEEDED)")
    )
    assert isinstance(error, QueryRejected) and error.code == "sql_limit"
