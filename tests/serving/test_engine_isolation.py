"""One program never fails its batch (issue 27): whatever a program's text makes ClickHouse refuse, under any
error code, is that program's own typed error, and every other program of the batch gets exactly the result
it gets alone. A store that really fails still fails the whole call, retryably.

Everything runs on the real engine and the session's chDB. "Unknown" codes are made by emptying the
statement-fault list (``indexing.stores.clickhouse_faults.STATEMENT_FAULTS``): ClickHouse's own refusals
then reach the engine as unclassified store failures, as a code a later ClickHouse adds would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import indexing.stores.clickhouse_faults as faults
from core.errors import ProReError
from indexing.config import Config
from indexing.errors import StoreFailure
from indexing.index import IndexHandle, open_index
from indexing.schema import PRODUCTS
from serving.dsl import Program, Retrieval, ValidationError
from serving.engine import CacheSizes, Engine, ExecutionError, ExecutionResult
from serving.engine.plan import is_plain_filter
from serving.engine.sqlrun import SqlJob, SqlRunner
from tests.serving.strategies import near_valid_programs, programs

# Statements ClickHouse refuses, as a model wrote them (the validator now refuses most; the runner must
# isolate them anyway), and the codes it refuses them with.
REFUSED_SQL = [
    "SELECT DISTINCT id FROM products WHERE id IN (SELECT id, brand FROM products)",  # 20
    "SELECT id FROM products WHERE brand = lower(brand ORDER BY brand)",  # 62
    "SELECT id FROM products WHERE upper(brand LIMIT 1) = 'SONY'",  # 62
    "SELECT id FROM products WHERE lower(DISTINCT brand) = 'sony'",  # 46
    "SELECT id FROM products WHERE price < 1e400",  # 62
    "SELECT id FROM products WHERE release_date > today() - INTERVAL 'x' DAY",  # 62
    "SELECT id FROM products WHERE price < 'cheap'",  # 72
    "SELECT id FROM products WHERE price > (SELECT price FROM products)",  # 125
    "SELECT id FROM products WHERE id IN (SELECT id, brand FROM products) ORDER BY price LIMIT 5",  # 20, a union
]
GOOD_SQL = [
    "SELECT id FROM products WHERE price < 40",
    "SELECT DISTINCT id FROM products WHERE brand = 'Sony' OR rating > 4.5",
    "SELECT id FROM products WHERE id IN (SELECT id FROM products WHERE price > 300) AND in_stock",
    "SELECT id FROM products WHERE category = 'headphones' ORDER BY price DESC LIMIT 7",
    "SELECT id FROM products WHERE release_date > toDate('2021-06-01') ORDER BY rating, id LIMIT 20",
]
ENTRY = (Retrieval("text", "review", "sturdy build"),)


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


@pytest.fixture
def unknown_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ClickHouse refusal but a cap reaches the engine unclassified."""
    monkeypatch.setattr(faults, "STATEMENT_FAULTS", faults.LIMIT_FAULTS)


def job(handle: IndexHandle, sql: str) -> SqlJob:
    """The job the engine would run for ``sql``, skipping validation: every FROM reads the physical table."""
    tree = sqlglot.parse_one(
        sql.replace("FROM products", f"FROM {handle.table} AS products"), read="clickhouse"
    )
    assert isinstance(tree, sqlglot.exp.Select)
    where = tree.args.get("where")
    cond = where.this if where is not None and is_plain_filter(tree) else None
    return SqlJob(tree.sql(dialect="clickhouse"), tree, cond)


def runner(engine: Engine) -> SqlRunner:
    return SqlRunner(engine._query, engine.handle.table, engine.schema.table, engine.limits)


def mixed(bad_every: int) -> list[str]:
    out: list[str] = []
    bad = iter(REFUSED_SQL * 4)
    for i in range(24):
        out.append(next(bad) if i % bad_every == 0 else GOOD_SQL[i % len(GOOD_SQL)])
    return out


@pytest.mark.parametrize("classified", [True, False], ids=["listed-codes", "unknown-codes"])
@pytest.mark.parametrize("bad_every", [1, 3, 7])
def test_refused_statements_fail_alone_in_scans_and_unions(
    engine: Engine, classified: bool, bad_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not classified:
        monkeypatch.setattr(faults, "STATEMENT_FAULTS", faults.LIMIT_FAULTS)
    texts = mixed(bad_every)
    jobs = [job(engine.handle, sql) for sql in texts]
    assert any(j.where is not None for j in jobs) and any(j.where is None for j in jobs)  # both shapes
    run = runner(engine)
    out = run.run(jobs)
    alone = runner(engine)
    for sql, j, got in zip(texts, jobs, out, strict=True):
        if sql in REFUSED_SQL:
            assert isinstance(got, ExecutionError) and got.code == "exec_failed", (sql, got)
            assert got.message.startswith("the program's SQL failed: ") and "\n" not in got.one_line()
        else:
            assert got == alone.run_one(j), sql


def test_the_reported_program_is_refused_and_its_batch_runs(engine: Engine) -> None:
    reported = Program("SELECT DISTINCT id FROM products WHERE id IN (SELECT id, brand FROM products)")
    good = [Program(sql) for sql in GOOD_SQL]
    out = Engine(engine.handle).execute_many([good[0], reported, *good[1:]])
    assert isinstance(out[1], ValidationError) and out[1].code == "subquery_columns"
    fresh = Engine(engine.handle)
    for p, got in zip(good, [out[0], *out[2:]], strict=True):
        assert isinstance(got, ExecutionResult) and got == fresh.execute(p)


@pytest.mark.usefixtures("unknown_codes")
def test_unknown_codes_of_valid_programs_stay_their_own(engine: Engine) -> None:
    # Valid programs ClickHouse refuses at run time (72, 38, 125), with their codes unclassified.
    bad = [
        Program("SELECT id FROM products WHERE price < 'cheap' AND id IN <text_1>", ENTRY),
        Program("SELECT id FROM products WHERE toDate('abc') > release_date"),
        Program("SELECT id FROM products WHERE price > (SELECT price FROM products) ORDER BY id LIMIT 3"),
    ]
    good = [Program(sql) for sql in GOOD_SQL] + [Program(GOOD_SQL[0] + " AND id IN <text_1>", ENTRY)]
    batch = [p for pair in zip(good, bad * 2, strict=False) for p in pair] + good[len(bad) * 2 :]
    e = Engine(engine.handle)
    out = e.execute_many(batch, k=10)
    single = Engine(engine.handle, caches=CacheSizes.disabled())
    for p, got in zip(batch, out, strict=True):
        if p in bad:
            assert isinstance(got, ExecutionError) and got.code == "exec_failed"
            with pytest.raises(ExecutionError):
                single.execute(p, k=10)
        else:
            assert isinstance(got, ExecutionResult) and got == single.execute(p, k=10)
    assert e.stats().failed_batches == 0


def test_a_store_that_fails_a_good_statement_too_fails_the_call(
    small_index_cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No code is classified: the vanished table is told from a program's fault by the probe alone.
    monkeypatch.setattr(faults, "STATEMENT_FAULTS", frozenset())
    monkeypatch.setattr(faults, "STORE_FAULTS", frozenset())
    real = open_index(small_index_cfg, "ecommerce")
    copy = open_index(small_index_cfg, "ecommerce")
    copy.table = f"{real.table.split('.')[0]}.isolation_gone"  # a table that is not there
    engine = Engine(copy)
    with pytest.raises(StoreFailure) as info:
        engine.execute_many([Program(sql) for sql in GOOD_SQL * 4])
    assert info.value.retryable and "UNKNOWN_TABLE" in info.value.message
    assert engine.sql.calls == 2  # the scan and the probe: not split as if a program were at fault


def hostile_batch_member() -> st.SearchStrategy[Program]:
    return st.one_of(
        st.sampled_from([Program(sql) for sql in REFUSED_SQL]),
        near_valid_programs(PRODUCTS, max_entries=2),
        programs(PRODUCTS, max_entries=2),
    )


_alone: dict[str, ExecutionResult] = {}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    others=st.lists(hostile_batch_member(), min_size=1, max_size=8),
    good=st.lists(st.sampled_from(range(len(GOOD_SQL) + 1)), min_size=1, max_size=6),
    at=st.randoms(use_true_random=False),
    classified=st.booleans(),
)
def test_good_programs_get_their_own_results_in_any_hostile_batch(
    engine: Engine, others: list[Program], good: list[int], at: Any, classified: bool
) -> None:
    goods = [Program(sql) for sql in GOOD_SQL] + [Program(GOOD_SQL[1] + " AND id IN <text_1>", ENTRY)]
    for p in goods:
        if p.sql not in _alone:
            _alone[p.sql] = Engine(engine.handle).execute(p, k=10)
    batch: list[tuple[bool, Program]] = [(True, goods[i]) for i in good] + [(False, p) for p in others]
    at.shuffle(batch)
    with pytest.MonkeyPatch.context() as patch:
        if not classified:
            patch.setattr(faults, "STATEMENT_FAULTS", faults.LIMIT_FAULTS)
        out = Engine(engine.handle).execute_many([p for _, p in batch], k=10)
    for (is_good, p), got in zip(batch, out, strict=True):
        if is_good:
            assert got == _alone[p.sql], p.sql
        else:
            assert isinstance(got, ExecutionResult | ProReError) and not getattr(got, "retryable", False)
