"""Hostile programs (tests/serving/data/hostile.jsonl) through the engine: each is rejected with its code
before anything reaches ClickHouse or Milvus, and the stores are exactly as they were."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config
from serving.dsl import DslError, Program, parse_program
from serving.engine import Engine

HOSTILE = Path(__file__).parent / "data" / "hostile.jsonl"


def load_hostile() -> list[dict[str, Any]]:
    return [json.loads(line) for line in HOSTILE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


def fingerprint(engine: Engine) -> tuple[Any, ...]:
    """Row count and an order-independent checksum of the table, the Milvus entity count, the tables."""
    h = engine.handle
    rows = h.sql.query(f"SELECT count(), sum(cityHash64(*)) FROM {h.table}")[0]
    db = h.table.split(".")[0]
    tables = h.sql.query(f"SELECT count() FROM system.tables WHERE database = '{db}'")[0][0]
    return (int(rows[0]), int(rows[1]), h.vectors.count(h.collection), int(tables))


def test_the_corpus_is_large_enough() -> None:
    assert len(load_hostile()) >= 70


def _parsed(case: dict[str, Any]) -> Program | DslError:
    """The program parsed at the edge, as every caller of the engine does; a FormatError is the outcome."""
    try:
        return parse_program(case["program"])
    except DslError as exc:
        return exc


def test_hostile_programs_are_rejected_before_any_store(engine: Engine) -> None:
    cases = load_hostile()
    before = fingerprint(engine)
    fresh = Engine(engine.handle)
    parsed = [_parsed(c) for c in cases]
    programs = [p for p in parsed if isinstance(p, Program)]
    ran = iter(fresh.execute_many(programs))
    outcomes = [p if isinstance(p, DslError) else next(ran) for p in parsed]
    wrong = [
        (c["name"], c["code"], getattr(o, "code", type(o).__name__))
        for c, o in zip(cases, outcomes, strict=True)
        if not (isinstance(o, DslError) and o.code == c["code"])
    ]
    assert wrong == []
    assert len(programs) >= 0.9 * len(cases)  # most hostile programs get as far as the engine
    # One by one, too: execute raises the same typed error.
    for c, p in zip(cases, parsed, strict=True):
        if isinstance(p, DslError):
            continue
        with pytest.raises(DslError) as info:
            fresh.execute(p)
        assert info.value.code == c["code"], c["name"]
        assert "\n" not in info.value.one_line()
    assert fresh.sql.calls == 0
    assert sum(fresh.retriever.calls.values()) == 0
    assert fingerprint(engine) == before


def test_the_dates_and_numbers_refused_as_never_runnable_fail_on_clickhouse(engine: Engine) -> None:
    """The ``bad_date`` and number-condition cases, sent to chDB as written (the validator bypassed): ClickHouse
    refuses each, except a month 13, which it reads as some other day (refused because it says nothing)."""
    h = engine.handle
    outcomes: dict[str, str] = {}
    for case in load_hostile():
        if case["code"] not in ("bad_date", "not_boolean") or case["program"]["retrieval_list"]:
            continue
        sql = case["program"]["sql"].replace("FROM products", f"FROM {h.table} AS products", 1)
        try:
            h.sql.query(sql)
        except Exception as exc:
            outcomes[case["name"]] = type(exc).__name__
        else:
            outcomes[case["name"]] = "ran"
    assert len(outcomes) >= 8
    assert {name for name, got in outcomes.items() if got == "ran"} == {"date_month_13"}, outcomes
