"""BM25 from several threads: concurrent searches and builds give what one thread gives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bm25s", reason="needs the bm25 extra")
pytest.importorskip("Stemmer", reason="needs the bm25 extra")

from indexing.stores.base import Hit
from indexing.stores.bm25 import Bm25Index

WORDS = [
    "running",
    "runner",
    "runs",
    "ran",
    "cancelling",
    "cancellation",
    "cancelled",
    "batteries",
    "battery",
    "charging",
    "charger",
    "chargers",
    "connection",
    "connecting",
    "connected",
    "headphones",
    "speakers",
    "speaking",
    "spoke",
    "universal",
    "universities",
    "university",
    "generously",
    "generous",
    "generation",
    "generating",
    "general",
    "generals",
    "quickly",
    "quickest",
    "quicker",
    "quickness",
]


def _texts(n: int, shift: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3 + shift) % len(WORDS)] for j in range(12)) for i in range(n)]


def _queries(n: int) -> list[str]:
    return [
        " ".join(WORDS[(i * 5 + j) % len(WORDS)] + ("s" if (i + j) % 3 == 0 else "") for j in range(4))
        for i in range(n)
    ]


def _in_threads(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    out: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        try:
            barrier.wait()
            out[i] = jobs[i]()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return out


def test_concurrent_searches_on_several_indexes_equal_sequential_ones() -> None:
    indexes = [Bm25Index.build([f"D{s}{i:04d}" for i in range(400)], _texts(400, s)) for s in range(4)]
    queries = _queries(300)
    want = [idx.search(queries, 10) for idx in indexes]

    def one_by_one(idx: Bm25Index) -> Callable[[], list[list[Hit]]]:
        return lambda: [idx.search([q], 10)[0] for q in queries]

    jobs = [one_by_one(idx) for idx in indexes * 3]
    for got, idx_no in zip(_in_threads(jobs), [i % 4 for i in range(12)], strict=True):
        assert got == want[idx_no]


def test_concurrent_builds_and_searches_equal_sequential_ones() -> None:
    ids = [f"D{i:04d}" for i in range(300)]
    sequential = [Bm25Index.build(ids, _texts(300, s)).search(_queries(120), 5) for s in range(6)]

    def build_and_search(shift: int) -> Callable[[], list[list[Hit]]]:
        return lambda: Bm25Index.build(ids, _texts(300, shift)).search(_queries(120), 5)

    jobs = [build_and_search(s) for s in range(6)]
    assert _in_threads(jobs) == sequential


def test_loaded_indexes_are_a_bounded_cache_shared_by_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.cache import LRU
    from indexing.stores import bm25

    monkeypatch.setattr(bm25, "_LOADED", LRU(3))
    index = Bm25Index.build(["a", "b"], ["noise cancelling", "battery life"])
    dirs = [tmp_path / f"f{i}" for i in range(5)]
    for d in dirs:
        index.save(d)
    loads: list[Path] = []
    real_load = Bm25Index.load

    def counted_load(cls: type[Bm25Index], directory: Path) -> Bm25Index:
        loads.append(directory)
        return real_load(directory)

    monkeypatch.setattr(Bm25Index, "load", classmethod(counted_load))
    same = _in_threads([lambda: bm25.load_cached(dirs[0]) for _ in range(6)])
    assert all(x is same[0] for x in same) and len(loads) == 1  # one thread loaded it, the others waited
    [[(_, want)]] = index.search(["battery"], 1)
    for d in dirs:
        [[(hit, score)]] = bm25.load_cached(d).search(["battery"], 1)
        assert hit == "b" and score == pytest.approx(want)
    assert bm25.loaded_stats().size == 3
    bm25.forget(dirs[-1])
    assert bm25.loaded_stats().size == 2
