"""Lifetimes on the real engines: handles lease their version, release what they open, and move to a new CURRENT."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import build_index, list_versions
from indexing.config import Config
from indexing.errors import StoreError
from indexing.index import open_index
from indexing.stores.clickhouse import make_sql_store
from indexing.stores.milvus import make_vector_store, milvus_uri, open_connections
from indexing.workspace import Workspace

Factory = Callable[..., Config]


def _dim(cfg: Config, dim: int) -> Config:
    return cfg.replace(embedder=dataclasses.replace(cfg.embedder, hashing_dim=dim))


def _threads_left_by(work: Callable[[], None], *, grace_s: float = 5.0) -> list[str]:
    """The names of threads that `work` started and that are still alive after a grace period.

    Other tests' background threads (servers, pools) come and go while this one runs, so counting
    all threads is noisy. A leak shows as threads started by `work` that never end; 100 cycles of
    a leaking open/close leave dozens behind, so a small allowance still catches one.
    """
    before = set(threading.enumerate())
    work()
    deadline = time.monotonic() + grace_s
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive())


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_open_handle_keeps_its_version_through_later_builds_and_close_lets_it_go(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    cfg = workspace_config("leases", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "ecommerce", 120)
    assert build_index(cfg, "ecommerce", progress=False).version == "v0001"
    old = open_index(cfg, "ecommerce")
    title = old.fetch_docs(["P00007"], ["title"])[0]["title"]
    dense = old.dense_search("title", [title], 5)
    sparse = old.sparse_search("title", [title], 5)
    sql = old.sql.query(f"SELECT count() FROM {old.table} WHERE brand = 'Sony'")

    second = build_index(_dim(cfg, 48), "ecommerce", progress=False)
    third = build_index(_dim(cfg, 40), "ecommerce", progress=False)
    assert (second.version, third.version) == ("v0002", "v0003")
    assert third.dropped == () and third.in_use == ("v0001",) and "kept v0001 (in use)" in third.summary()
    ws = Workspace(cfg.workspace)
    assert list_versions(ws, "ecommerce") == ["v0001", "v0002", "v0003"]
    # The old handle still answers everything on v0001, with v0001's embedder (32 dimensions).
    assert old.sql.query(f"SELECT count() FROM {old.table} WHERE brand = 'Sony'") == sql
    assert old.dense_search("title", [title], 5) == dense and old.embedder("title").dim == 32
    assert old.sparse_search("title", [title], 5) == sparse
    assert old.fetch_docs(["P00007"], ["title"])[0]["title"] == title
    assert not old.is_current()

    old.close()
    old.close()  # twice is harmless
    with pytest.raises(StoreError) as closed:
        old.dense_search("title", [title], 5)
    assert closed.value.code == "closed"
    fourth = build_index(_dim(cfg, 36), "ecommerce", progress=False)
    assert fourth.version == "v0004" and set(fourth.dropped) == {"v0001", "v0002"} and fourth.in_use == ()
    assert list_versions(ws, "ecommerce") == ["v0003", "v0004"]
    with make_sql_store(cfg) as sql_store, make_vector_store(cfg) as vec:
        assert not sql_store.table_exists(f"{cfg.clickhouse.database}.products__v0001")
        assert not vec.has_collection("products__v0001")
    with pytest.raises(StoreError) as gone:
        open_index(cfg, "ecommerce", version="v0001")
    assert gone.value.code == "no_index"


def test_a_service_switches_to_a_new_current_without_restarting(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    cfg = workspace_config("refresh", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "email", 80)
    build_index(cfg, "email", progress=False)
    handle = open_index(cfg, "email")
    assert handle.refresh() is handle and handle.is_current()
    write_synthetic_corpus(cfg, "email", 90, seed=1)
    build_index(cfg, "email", progress=False)
    new = handle.refresh()
    assert (handle.version, new.version, new.rows) == ("v0001", "v0002", 90)
    assert handle.sql.count(handle.table) == 80  # the old one serves until it is closed
    handle.close()
    assert new.sql.count(new.table) == 90 and new.dense_search("body", ["lunch plans"], 3)[0]
    new.close()


def test_opening_and_closing_a_handle_100_times_leaves_no_descriptor_or_thread_behind(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    cfg = workspace_config("fds", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "email", 60)
    build_index(cfg, "email", progress=False)
    uri = milvus_uri(cfg)

    def cycle() -> None:
        with open_index(cfg, "email") as idx:
            assert idx.dense_search("body", ["server outage"], 3)[0]
            assert idx.sparse_search("body", ["server outage"], 3)[0]
            assert idx.sql.count(idx.table) == 60

    def hundred_cycles() -> None:
        for _ in range(100):
            cycle()

    for _ in range(5):  # warm-up: models, BM25 indexes and chDB are loaded once per process
        cycle()
    fds = _fds()
    left = _threads_left_by(hundred_cycles)
    assert uri not in open_connections()  # the last store on the URI closed its client
    assert _fds() <= fds + 3, (fds, _fds())
    assert len(left) <= 2, left


def test_opening_and_closing_an_engine_100_times_leaves_no_descriptor_or_thread_behind(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    from serving.engine.engine import Engine

    cfg = workspace_config("engines", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "email", 60)
    build_index(cfg, "email", progress=False)
    for _ in range(3):
        Engine.open(cfg, "email").close()

    def cycles() -> None:
        for _ in range(100):
            engine = Engine.open(cfg, "email")
            assert engine.handle.fetch_docs(["E00001"], ["subject"])
            engine.close()
            assert engine.handle.closed

    fds = _fds()
    left = _threads_left_by(cycles)
    assert milvus_uri(cfg) not in open_connections()
    assert _fds() <= fds + 3, (fds, _fds())
    assert len(left) <= 2, left
