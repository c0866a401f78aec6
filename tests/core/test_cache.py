"""The one bounded cache: LRU order, bounds, counters and use from several threads."""

from __future__ import annotations

import threading

from core.cache import LRU, CacheStats


def test_least_recently_used_goes_first_and_peek_changes_nothing() -> None:
    c: LRU[str, int] = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1  # not a use: "a" stays the oldest
    c.put("c", 3)
    assert "a" not in c and c.get("b") == 2 and c.get("c") == 3
    assert c.stats() == CacheStats(hits=2, misses=0, size=2, maxsize=2)
    assert c.pop("b") == 2 and c.pop("b") is None and len(c) == 1
    c.clear()
    assert c.stats() == CacheStats(0, 0, 0, 2)


def test_size_zero_caches_nothing() -> None:
    c: LRU[str, int] = LRU(0)
    c.put("a", 1)
    assert c.get("a") is None and len(c) == 0 and c.capacity == 0
    assert c.stats() == CacheStats(hits=0, misses=1, size=0, maxsize=0)


def test_threads_share_one_cache_consistently() -> None:
    c: LRU[int, int] = LRU(50)
    rounds, workers = 2000, 8
    errors: list[BaseException] = []
    hot = -1
    c.put(hot, hot * hot)  # put by this thread, read by every worker

    def work(seed: int) -> None:
        try:
            for i in range(rounds):
                # 120 keys cycled through a 50-entry cache: misses, puts and evictions from every thread ...
                key = (i * 7 + seed) % 120
                found = c.get(key)
                if found is None:
                    c.put(key, key * key)
                else:
                    assert found == key * key
                # ... and one key every thread reads every round, so it is never least recently used: hits
                # whatever the scheduling (a cyclic scan alone can miss every time in an LRU cache).
                assert c.get(hot) == hot * hot
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = c.stats()
    assert stats.hits + stats.misses == 2 * rounds * workers
    assert stats.size == 50 and stats.hits >= rounds * workers
