"""``now()``, ``today()`` and ``yesterday()`` mean the index version's reference time, written when the
version was built: a program gives the same SQL and the same rows on every run, whenever it runs."""

from __future__ import annotations

import datetime
import time

import pytest
import sqlglot

from indexing.config import Config
from indexing.index import reference_time_of, reference_time_text
from serving.dsl import Program
from serving.engine import Engine
from serving.engine.plan import pin_clock

# The parity of the seconds since each email flips every second: any reading of the wall clock shows.
TICKING = Program("SELECT id FROM emails WHERE DATE_DIFF(SECOND, date, now()) % 2 = 0")
DAYS = Program(
    "SELECT id FROM emails WHERE toDate(date) <= yesterday() AND toDate(date) < today() AND date < now()"
)


def test_the_version_records_its_reference_time(small_index_cfg: Config) -> None:
    engine = Engine.open(small_index_cfg, "email")
    try:
        assert engine.handle.meta["reference_time"] == reference_time_text(engine.reference_time)
        assert engine.reference_time.tzinfo is datetime.UTC
    finally:
        engine.close()


def test_a_program_reading_the_clock_means_the_same_on_every_run(small_index_cfg: Config) -> None:
    first = Engine.open(small_index_cfg, "email")
    before = first.execute(TICKING, k=1000)
    time.sleep(1.1)  # a second later by the wall clock
    second = Engine.open(small_index_cfg, "email")
    after = second.execute(TICKING, k=1000)
    pinned = first.reference_time.strftime("%Y-%m-%d %H:%M:%S")
    assert f"toDateTime('{pinned}', 'UTC')" in before.sql and "now()" not in before.sql
    assert (before.sql, before.ids) == (after.sql, after.ids)
    oracle = first.handle.sql.query(
        f"SELECT id FROM {first.handle.table} "
        f"WHERE dateDiff('second', date, toDateTime('{pinned}', 'UTC')) % 2 = 0 ORDER BY id LIMIT 1000"
    )
    assert list(before.ids) == [str(r[0]) for r in oracle]
    first.close()
    second.close()


def test_today_and_yesterday_are_the_reference_date_and_the_day_before(small_index_cfg: Config) -> None:
    engine = Engine.open(small_index_cfg, "email")
    try:
        sql = engine.execute(DAYS).sql
        day = engine.reference_time.date()
        assert f"toDate('{(day - datetime.timedelta(days=1)).isoformat()}')" in sql
        assert f"toDate('{day.isoformat()}')" in sql
        assert not any(f"{fn}()" in sql for fn in ("now", "today", "yesterday"))
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT id FROM emails WHERE date < now()", "date < toDateTime('2024-03-01 00:30:00', 'UTC')"),
        (
            "SELECT id FROM emails WHERE date < now('Europe/Paris')",
            "date < toDateTime(toDateTime('2024-03-01 00:30:00', 'UTC'), 'Europe/Paris')",
        ),
        ("SELECT id FROM emails WHERE toDate(date) = today()", "toDate(date) = toDate('2024-03-01')"),
        ("SELECT id FROM emails WHERE toDate(date) = yesterday()", "toDate(date) = toDate('2024-02-29')"),
        ("SELECT id FROM emails WHERE subject = 'now()'", "subject = 'now()'"),
    ],
)
def test_pin_clock(sql: str, expected: str) -> None:
    tree = sqlglot.parse_one(sql, read="clickhouse")
    assert isinstance(tree, sqlglot.exp.Select)
    # An aware reference time in another zone is the same instant: pinned as UTC.
    paris = datetime.datetime(2024, 3, 1, 1, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert pin_clock(tree, paris).sql(dialect="clickhouse").endswith(expected)
    assert tree.sql(dialect="clickhouse") == sqlglot.parse_one(sql, read="clickhouse").sql(
        dialect="clickhouse"
    )


def test_versions_written_before_the_field_use_their_publication_time() -> None:
    moment = reference_time_of({"published_at": "2024-01-02T03:04:05Z"})
    assert moment == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
