"""A failure that is not a program's fails the whole call with one typed, retryable error; a program's own
fault stays that program's ExecutionError. Runs on a scratch copy of the corpus table, which the tests drop."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from indexing.config import Config
from indexing.errors import QueryRejected, StoreError, StoreFailure
from indexing.index import IndexHandle, open_index
from serving.dsl import Program, Retrieval
from serving.engine import Engine, ExecutionError, ExecutionResult

_names = itertools.count()


def copy_table(handle: IndexHandle, table: str) -> None:
    handle.sql.command(f"CREATE TABLE {table} AS {handle.table}")
    handle.sql.command(f"INSERT INTO {table} SELECT * FROM {handle.table}")


@pytest.fixture
def scratch(small_index_cfg: Config) -> Iterator[tuple[IndexHandle, IndexHandle]]:
    """(the published index, a handle on it whose corpus table is a scratch copy)."""
    real = open_index(small_index_cfg, "ecommerce")
    copy = open_index(small_index_cfg, "ecommerce")
    copy.table = f"{real.table.split('.')[0]}.scratch_{next(_names)}"
    copy_table(real, copy.table)
    yield real, copy
    real.sql.drop_table(copy.table)


class DropsTheTable:
    """The real store, which drops ``table`` right after its ``after``-th untrusted query: the corpus
    table vanishing between two statements of one batch, as when a version is removed under a reader."""

    def __init__(self, inner: Any, table: str, after: int) -> None:
        self.inner, self.table, self.after, self.calls = inner, table, after, 0

    def query(self, sql: str, **kwargs: Any) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.inner.query(sql, **kwargs)
        self.calls += 1
        if self.calls == self.after:
            self.inner.drop_table(self.table)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def filters(n: int) -> list[Program]:
    return [Program(f"SELECT id FROM products WHERE price < {10 * (i + 1)}") for i in range(n)]


def ordered(n: int) -> list[Program]:
    return [
        Program(
            f"SELECT id FROM products WHERE rating > {i % 4} AND id IN <text_1> ORDER BY price DESC LIMIT 3",
            (Retrieval("text", "review", "sturdy build"),),
        )
        for i in range(n)
    ]


def test_a_dropped_table_fails_the_batch_once_and_retryably(scratch: tuple[IndexHandle, IndexHandle]) -> None:
    _, copy = scratch
    engine = Engine(copy)
    assert all(isinstance(o, ExecutionResult) for o in engine.execute_many(filters(2)))
    copy.sql.drop_table(copy.table)
    fresh = Engine(copy)
    with pytest.raises(StoreFailure) as info:
        fresh.execute_many(filters(16))
    assert info.value.retryable and info.value.code == "store_failure"
    assert "UNKNOWN_TABLE" in info.value.message and "\n" not in info.value.one_line()
    assert fresh.sql.calls == 1  # not split program by program as if one of them were at fault
    with pytest.raises(StoreFailure):
        fresh.execute(filters(1)[0])


def test_a_store_failing_in_the_middle_of_a_batch(scratch: tuple[IndexHandle, IndexHandle]) -> None:
    real, copy = scratch
    batch = filters(6) + ordered(6)
    proxy = DropsTheTable(copy.sql, copy.table, after=1)
    copy.sql = proxy  # type: ignore[assignment]
    engine = Engine(copy)
    with pytest.raises(StoreFailure):
        engine.execute_many(batch, k=5)
    assert proxy.calls == 1  # the filter scan ran; the union found the table gone
    assert engine.cache_stats()["sql"]["size"] == 0  # no half of the batch was kept
    copy_table(real, copy.table)
    again = engine.execute_many(batch, k=5)
    reference = Engine(real).execute_many(batch, k=5)
    for a, b in zip(again, reference, strict=True):
        assert isinstance(a, ExecutionResult) and isinstance(b, ExecutionResult)
        assert (a.ids, a.scores) == (b.ids, b.scores)


def test_a_program_s_own_fault_stays_its_own(scratch: tuple[IndexHandle, IndexHandle]) -> None:
    _, copy = scratch
    batch = [*filters(3), Program("SELECT id FROM products WHERE price < 'cheap'"), *filters(3)]
    out = Engine(copy).execute_many(batch)
    assert isinstance(out[3], ExecutionError) and out[3].code == "exec_failed"
    assert all(isinstance(o, ExecutionResult) for i, o in enumerate(out) if i != 3)


@pytest.mark.parametrize(
    ("where", "kind", "number", "code"),
    [
        ("price < 'cheap'", QueryRejected, 72, "sql"),  # CANNOT_PARSE_NUMBER
        ("'UTC'", QueryRejected, 59, "sql"),  # ILLEGAL_TYPE_OF_COLUMN_FOR_FILTER
        ("toDate('abc') > release_date", QueryRejected, 38, "sql"),  # CANNOT_PARSE_DATE
        ("lower(1) = 'a'", QueryRejected, 43, "sql"),  # ILLEGAL_TYPE_OF_ARGUMENT
        ("dateDiff('fortnight', release_date, release_date) = 1", QueryRejected, 36, "sql"),  # BAD_ARGUMENTS
        ("nosuch = 1", QueryRejected, 47, "sql"),  # UNKNOWN_IDENTIFIER
        ("1 = 1 AND", QueryRejected, 62, "sql"),  # SYNTAX_ERROR
    ],
)
def test_statement_faults_are_query_rejections(
    small_index_cfg: Config, where: str, kind: type[StoreError], number: int, code: str
) -> None:
    handle = open_index(small_index_cfg, "ecommerce")
    with pytest.raises(StoreError) as info:
        handle.sql.query(f"SELECT id FROM {handle.table} WHERE {where}")
    assert type(info.value) is kind and info.value.code == code and not info.value.retryable
    assert isinstance(info.value, QueryRejected) and info.value.number == number


def test_caps_are_query_rejections_and_a_missing_table_is_a_store_failure(small_index_cfg: Config) -> None:
    handle = open_index(small_index_cfg, "ecommerce")
    with pytest.raises(QueryRejected) as cap:
        handle.sql.query(f"SELECT id FROM {handle.table}", settings={"max_result_rows": 3})
    assert cap.value.code == "sql_limit" and cap.value.number == 396
    with pytest.raises(StoreFailure) as gone:
        handle.sql.query(f"SELECT id FROM {handle.table}_missing")
    assert gone.value.retryable
