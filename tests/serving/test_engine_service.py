"""What services need from the engine: calls from many threads, per-request deadlines, per-program
timings and counters for a metrics exporter (real chDB, Milvus Lite and MiniLM)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from core.errors import ProReError
from indexing.config import Config
from serving.dsl import Program, ValidationError
from serving.engine import DeadlineExceeded, Engine, ExecutionResult
from tests.serving.batch_support import docs, mixed_batch, ordered, plain, programs, same


@pytest.fixture(scope="module")
def handle(small_index_cfg: Config) -> Iterator[Any]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e.handle
    e.close()


def outcome(engine: Engine, p: Program) -> ExecutionResult | ProReError:
    try:
        return engine.execute(p, k=10)
    except ProReError as exc:
        return exc


def test_execute_from_eight_threads_equals_sequential(handle: Any) -> None:
    batch = mixed_batch(handle) + programs([plain(d, "fuse") for d in docs(handle, 10)])
    sequential = [outcome(Engine(handle), p) for p in batch]
    engine = Engine(handle)
    work = [i for _ in range(3) for i in range(len(batch))]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda i: (i, outcome(engine, batch[i])), work))
    assert len(threaded) == 3 * len(batch)
    for i, got in threaded:
        same(got, sequential[i])
    assert engine.stats().programs == len(work) and engine.stats().batches == len(work)


class Stalls:
    """The real store, which after its first untrusted query waits until ``deadline`` has passed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.deadline = inner, math.inf
        self.settings: list[dict[str, Any]] = []

    def query(self, sql: str, **kwargs: Any) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.inner.query(sql, **kwargs)
        if kwargs.get("settings"):
            self.settings.append(dict(kwargs["settings"]))
            time.sleep(max(0.0, self.deadline - time.monotonic()) + 0.01)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_deadline_that_expires_mid_batch(small_index_cfg: Config) -> None:
    with Engine.open(small_index_cfg, "ecommerce") as engine:
        ds = docs(engine.handle, 8)
        batch = programs([plain(d) for d in ds[:4]] + [ordered(d) for d in ds[4:]])
        reference = engine.execute_many(batch, k=5)  # warms retrieval; the SQL caches are dropped next
        engine.clear_caches(retrieval=False)
        store = Stalls(engine.handle.sql)
        engine.handle.sql = store
        store.deadline = time.monotonic() + 3.0
        out = engine.execute_many(batch, k=5, deadline=store.deadline)
        stats = engine.stats()
    # The filter scan ran before the deadline; the union of ORDER BY programs was due after it.
    assert len(store.settings) == 1
    assert (
        0 < store.settings[0]["max_execution_time"] < engine.limits.max_execution_time_s
    )  # capped by the time left
    for got, want in zip(out[:4], reference[:4], strict=True):
        same(got, want)
    late = out[4:]
    assert all(
        isinstance(o, DeadlineExceeded) and o.retryable and o.code == "deadline_exceeded" for o in late
    )
    assert stats.errors == {"deadline_exceeded": 4}


def test_a_deadline_already_past(handle: Any) -> None:
    engine = Engine(handle)
    batch = mixed_batch(handle)
    out = engine.execute_many(batch, timeout_s=0)
    for o in out:
        assert isinstance(o, ValidationError | DeadlineExceeded), o
    assert sum(isinstance(o, DeadlineExceeded) for o in out) == 10 and engine.sql.calls == 0
    with pytest.raises(DeadlineExceeded):
        engine.execute(batch[0], deadline=time.monotonic() - 1)
    assert isinstance(engine.execute(batch[0], timeout_s=60), ExecutionResult)


def test_stats_count_programs_errors_batches_and_caches(handle: Any) -> None:
    engine = Engine(handle)
    batch = mixed_batch(handle)
    engine.execute_many(batch, k=10)
    s = engine.stats()
    assert (s.programs, s.results, s.batches, s.failed_batches) == (12, 8, 1, 0)
    assert s.errors == {"placeholder_out_of_range": 1, "unknown_column": 1, "exec_failed": 2}
    assert s.sql_calls == engine.sql.calls > 0 and s.store_calls["ann"] == engine.retriever.calls["ann"] > 0
    assert s.caches["programs"].misses == 11 and s.caches["programs"].hits == 1  # one repeated rollout
    assert s.caches["programs"].size == 11 and s.caches["programs"].maxsize == 50_000
    assert any(name.startswith("embeddings:") for name in s.caches)
    assert s.stage_ms["total"] > 0 and set(s.stage_ms) >= {"validate", "embed", "ann", "sql", "rank"}
    engine.execute_many(batch, k=10)
    t = engine.stats()
    assert (t.programs, t.results, t.batches) == (24, 16, 2)
    assert t.errors["exec_failed"] == 4 and t.caches["programs"].hits == 13
    assert t.caches["requests"].hits > s.caches["requests"].hits
    assert t.sql_calls > s.sql_calls  # failed programs are not cached: they run again
    assert t.stage_ms["total"] > s.stage_ms["total"]


def test_per_program_timings_are_their_own_and_sum_to_the_batch(handle: Any) -> None:
    ds = docs(handle, 8)
    raw = [plain(d) for d in ds[:3]] + [plain(d, "sparse") for d in ds[3:5]] + [ordered(d) for d in ds[5:]]
    raw.append({"sql": "SELECT id FROM products WHERE price < 50", "retrieval_list": []})
    engine = Engine(handle)
    engine.clear_caches()
    out = engine.execute_many(programs(raw), k=10)
    results = [o for o in out if isinstance(o, ExecutionResult)]
    assert len(results) == len(raw)
    batch = engine.stats().stage_ms
    for r in results:
        assert math.isclose(r.timings["total"], sum(v for s, v in r.timings.items() if s != "total"))
    assert len({round(r.timings["total"], 6) for r in results}) > 1  # not a batch average
    no_retrieval, sparse_only = results[-1], results[3]
    assert no_retrieval.timings["embed"] == no_retrieval.timings["ann"] == no_retrieval.timings["sparse"] == 0
    assert sparse_only.timings["embed"] == 0 and sparse_only.timings["sparse"] > 0
    assert results[0].timings["sparse"] == 0 and results[0].timings["embed"] > 0
    for stage in ("embed", "ann", "sparse"):  # shared work is split, never counted twice
        assert math.isclose(sum(r.timings[stage] for r in results), batch[stage], rel_tol=1e-9, abs_tol=1e-9)
    for stage in ("validate", "sql", "rank"):  # own work happens inside the batch's stage
        assert sum(r.timings[stage] for r in results) <= batch[stage] + 1e-6
    again = engine.execute_many(programs(raw), k=10)  # every search and result cached
    assert all(isinstance(o, ExecutionResult) and o.timings["embed"] == o.timings["ann"] == 0 for o in again)
