"""``execute_many``, the reward's entry point: same answers as a loop of ``execute``, fewer store calls,
and a failing program fails alone, in its place."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from core.errors import ConfigError, ProReError
from indexing.config import Config
from serving.dsl import DslError, ValidationError
from serving.engine import CacheSizes, Engine, ExecutionError, ExecutionResult, PlanningOptions
from serving.settings import ServingSettings
from tests.serving.batch_support import (
    docs,
    failing_at_runtime,
    mixed_batch,
    ordered,
    plain,
    programs,
    same,
)


@pytest.fixture(scope="module")
def handle(small_index_cfg: Config) -> Iterator[Any]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e.handle
    e.close()


def test_batch_equals_a_loop_of_execute(handle: Any) -> None:
    batch = mixed_batch(handle)
    many = Engine(handle).execute_many(batch, k=10)
    looped = Engine(handle)
    loop: list[ExecutionResult | ProReError] = []
    for p in batch:
        try:
            loop.append(looped.execute(p, k=10))
        except ProReError as exc:
            loop.append(exc)
    assert len(many) == len(batch)
    for a, b in zip(many, loop, strict=True):
        same(a, b)
    kinds = [type(o) for o in many]
    assert kinds[1] is ValidationError and kinds[6] is ValidationError
    assert kinds[4] is ExecutionError and kinds[10] is ExecutionError
    assert all(k is ExecutionResult for i, k in enumerate(kinds) if i not in (1, 4, 6, 10))
    assert isinstance(many[1], DslError) and many[1].code == "placeholder_out_of_range"
    assert isinstance(many[6], ValidationError) and many[6].code == "unknown_column"
    assert isinstance(many[4], ExecutionError) and many[4].code == "exec_failed"


def test_batch_makes_few_store_calls(handle: Any) -> None:
    ds = docs(handle, 12)
    batch = programs([plain(d) for d in ds] + [ordered(d) for d in ds[:4]])
    engine = Engine(
        handle, planning=PlanningOptions.fixed_k()
    )  # pushdown gives each filter a search of its own
    out = engine.execute_many(batch)
    assert all(isinstance(o, ExecutionResult) for o in out)
    # One embedding call per embedder (text and image share MiniLM), one vector search per field.
    assert engine.retriever.calls["embed"] == 1
    assert engine.retriever.calls["ann"] == 2
    # Plain filters share one scan; ORDER BY programs share one UNION ALL.
    assert engine.sql.calls == 2
    # Run again: every retrieval and every SQL result comes from the caches.
    again = engine.execute_many(batch)
    assert engine.retriever.calls["ann"] == 2 and engine.sql.calls == 2
    for a, b in zip(out, again, strict=True):
        same(a, b)


def test_a_failing_program_fails_alone(handle: Any) -> None:
    ds = docs(handle, 10)
    raw = [plain(d) for d in ds]
    raw[6] = failing_at_runtime(ds[6])
    batch = programs(raw)
    engine = Engine(handle)
    out = engine.execute_many(batch)
    assert isinstance(out[6], ExecutionError)
    reference = Engine(handle)
    for i, (o, p) in enumerate(zip(out, batch, strict=True)):
        if i != 6:
            same(o, reference.execute(p))
    assert engine.sql.calls > 1  # the scan was split to isolate the failure


def test_programs_that_differ_only_in_spacing_share_a_batch(handle: Any) -> None:
    """Their conditions render alike, so the batch scan has two equal expressions: each gets its own column."""
    entry = [{"type": "text", "field": "review", "query": "sturdy and light", "k": 5}]
    batch = programs([{"sql": sql, "retrieval_list": entry} for sql in (
        "SELECT DISTINCT id FROM products WHERE in_stock = true AND id IN <text_1>",
        "SELECT DISTINCT id FROM products WHERE  in_stock = true AND id IN <text_1>",
        "SELECT DISTINCT id FROM products WHERE (in_stock = true) AND id IN <text_1>",
    )])  # fmt: skip
    many = Engine(handle).execute_many(batch, k=10)
    alone = [Engine(handle).execute(p, k=10) for p in batch]
    assert all(isinstance(o, ExecutionResult) for o in many)
    for a, b in zip(many, alone, strict=True):
        same(a, b)


def test_results_come_back_in_input_order(handle: Any) -> None:
    ds = docs(handle, 6)
    batch = programs([plain(d) for d in ds])
    engine = Engine(handle)
    forward = engine.execute_many(batch)
    backward = Engine(handle).execute_many(list(reversed(batch)))
    for a, b in zip(forward, reversed(backward), strict=True):
        same(a, b)


def test_empty_batch(handle: Any) -> None:
    engine = Engine(handle)
    assert engine.execute_many([]) == []
    assert engine.sql.calls == 0


def test_batch_equals_single_programs_on_fresh_embedders(small_index_cfg: Config, handle: Any) -> None:
    # The single side embeds every phrase alone, through embedders of its own (another cache size is
    # another process-level cached embedder, so nothing the batch embedded is reused): batched and
    # single forward passes and dot products must still give the same answers (retrieval.py).
    batch = mixed_batch(handle) + programs(
        [plain(d, mode) for d in docs(handle, 6) for mode in ("dense", "fuse")]
    )
    many = Engine(handle).execute_many(batch, k=10)
    fresh_cfg = small_index_cfg.replace(embedder=dataclasses.replace(small_index_cfg.embedder, cache_size=3))
    with Engine.open(fresh_cfg, "ecommerce", caches=CacheSizes.disabled()) as single:
        shared = {id(handle.embedder(f)) for f in handle.schema.vector_fields}
        assert all(id(single.handle.embedder(f)) not in shared for f in handle.schema.vector_fields)
        for p, a in zip(batch, many, strict=True):
            try:
                b: ExecutionResult | ProReError = single.execute(p, k=10)
            except ProReError as exc:
                b = exc
            same(a, b)
        dense = sum(any(e.mode != "sparse" for e in p.retrieval_list) for p in batch)
        assert single.retriever.calls["embed"] == dense  # one call per program: nothing batched


def test_search_threads_change_no_answer_and_no_store_call(handle: Any) -> None:
    """A batch's store searches (here one per pushed filter and per conditioned candidate set) run up to
    ``search_threads`` at a time: the answers and the calls are those of one at a time."""
    ds = docs(handle, 12)
    batch = mixed_batch(handle) + programs([plain(d) for d in ds] + [ordered(d) for d in ds[:4]])
    one = Engine(handle, caches=CacheSizes(search_threads=1))
    many = Engine(handle, caches=CacheSizes(search_threads=4))
    before = set(threading.enumerate())
    try:
        a = one.execute_many(batch, k=10)
        assert set(threading.enumerate()) == before  # one at a time: no thread of its own
        b = many.execute_many(batch, k=10)
        for x, y in zip(a, b, strict=True):
            same(x, y)
        assert many.retriever.calls == one.retriever.calls and one.retriever.calls["ann"] > 4
        started = [t for t in set(threading.enumerate()) - before if t.name.startswith("engine-search")]
        assert started
    finally:
        many.retriever.close()  # the handle is the module's: the engine's close would release it
    assert not any(t.is_alive() for t in started)


def test_search_threads_are_one_or_more() -> None:
    with pytest.raises(ConfigError, match=r"serving\.engine\.search_threads must be 1 or more, got 0"):
        ServingSettings(engine=CacheSizes(search_threads=0))
