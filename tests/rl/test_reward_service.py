"""The reward service on a loopback port with real HTTP: coalescing, overload, a timeout, a restart,
malformed requests. Scores are checked against the scorer called directly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from indexing.config import Config
from indexing.stores.server import free_port
from rl.reward import RewardError, RewardItem, RewardScorer
from rl.reward.client import RewardClient
from rl.reward.instances import Answer, InstanceIndex
from rl.reward.service import create_app
from rl.reward.settings import ServiceSettings
from serving.dsl import parse_program
from serving.http.server import ServerThread

DOMAIN = "ecommerce"


@pytest.fixture(scope="module")
def scorer(small_index_cfg: Config) -> Iterator[RewardScorer]:
    s = RewardScorer.open(small_index_cfg, [DOMAIN])
    yield s
    s.close()


@pytest.fixture(scope="module")
def rollouts(scorer: RewardScorer) -> list[dict[str, Any]]:
    """48 items: 12 prompts x 4 samples, with repeats, a miss, an invalid program and garbage."""
    handle = scorer.engines[DOMAIN].handle
    rows = handle.sql.query(
        f"SELECT price, review, brand FROM {handle.table} ORDER BY id LIMIT 12 OFFSET 100"
    )
    items: list[dict[str, Any]] = []
    for n, (price, review, brand) in enumerate(rows):
        words = str(review).split()
        good = {"sql": f"SELECT DISTINCT id FROM products WHERE price <= {float(price) + 1} AND id IN <text_1>",
                "retrieval_list": [{"type": "text", "field": "review", "query": " ".join(words[:5])}]}  # fmt: skip
        gold = scorer.engines[DOMAIN].execute(parse_program(good), k=20).ids[0]
        other = {"sql": "SELECT DISTINCT id FROM products WHERE brand = '" + str(brand).replace("'", "''") + "'"
                 " AND id IN <text_1>", "retrieval_list": [{"type": "text", "field": "review", "query": " ".join(words[2:8])}]}  # fmt: skip
        samples = [json.dumps(good), json.dumps(good), json.dumps(other),
                   ["not a program", '{"sql": "SELECT id FROM products WHERE colour = 1", "retrieval_list": []}'][n % 2]]  # fmt: skip
        items += [{"completion": c, "domain": DOMAIN, "gold_id": gold} for c in samples]
    return items


def reference(scorer: RewardScorer, items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    direct = scorer.score([RewardItem(i["completion"], i["domain"], i["gold_id"]) for i in items])
    return [wire_key(r.to_dict()) for r in direct]


def wire_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """A result as the service answers it, without timings."""
    return tuple((k, json.dumps(v)) for k, v in sorted(result.items()) if k != "timings")


class Running:
    def __init__(
        self, scorer: RewardScorer, port: int = 0, instances: InstanceIndex | None = None, **settings: Any
    ) -> None:
        self.settings = ServiceSettings(domains=(DOMAIN,), **settings)
        self.thread = ServerThread(create_app(self.settings, scorer, instances), port=port).start()
        self.url = self.thread.url

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics").text
        return {s.name + json.dumps(s.labels, sort_keys=True): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip

    def stop(self) -> None:
        self.thread.stop()


@pytest.fixture
def service(scorer: RewardScorer) -> Iterator[Running]:
    running = Running(scorer, window_ms=20.0)
    yield running
    running.stop()


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    return values.get(name + json.dumps(labels, sort_keys=True), 0.0)


# -- health, readiness, scores ---------------------------------------------------------------------


def test_health_readiness_and_metrics_endpoints(service: Running) -> None:
    assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(service.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["domains"] == [DOMAIN]
    assert "reward_queue_depth" in httpx.get(service.url + "/metrics").text


def test_concurrent_clients_are_coalesced(
    service: Running, scorer: RewardScorer, rollouts: list[dict[str, Any]]
) -> None:
    async def client_run(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        async with RewardClient(service.url) as client:
            return await asyncio.gather(*(client.score_one(**i) for i in items))

    async def main() -> list[list[dict[str, Any]]]:
        # 8 clients, each sending its samples one request per sample, all at once (verl's reward loop).
        return await asyncio.gather(*(client_run(rollouts[c::8]) for c in range(8)))

    per_client = asyncio.run(main())
    got: list[Any] = [None] * len(rollouts)
    for c, results in enumerate(per_client):
        for j, r in enumerate(results):
            got[c + 8 * j] = wire_key(r)
    assert got == reference(scorer, rollouts)
    m = service.metrics()
    batches = metric(m, "reward_batch_items_count")
    assert metric(m, "reward_batch_items_sum") == len(rollouts)
    assert metric(m, "reward_programs_scored_total", domain=DOMAIN) == len(rollouts)
    assert 1 <= batches < len(rollouts)  # requests were merged
    assert metric(m, "reward_batch_items_bucket", le="1.0") < batches or batches == 1
    assert metric(m, "reward_requests_total", status="200") == len(rollouts)
    assert 0.0 < metric(m, "reward_layer_pass_rate", layer="format") < 1.0
    assert metric(m, "reward_engine_cache_hit_rate", domain=DOMAIN, cache="programs") > 0.0


def test_client_batching_sends_one_request_per_window_and_isolates_a_bad_item(
    service: Running, scorer: RewardScorer, rollouts: list[dict[str, Any]]
) -> None:
    async def main() -> tuple[list[Any], RewardClient]:
        async with RewardClient(service.url, batch_window_ms=50.0, max_batch_items=32) as client:
            calls = [client.score_one(**i) for i in rollouts[:20]]
            calls.append(client.score_one("{}", domain="recipes", gold_id="x"))  # a domain not served
            calls += [client.score_one(**i) for i in rollouts[20:]]
            return await asyncio.gather(*calls, return_exceptions=True), client

    got, client = asyncio.run(main())
    refused = got.pop(20)
    assert isinstance(refused, RewardError) and refused.code == "unknown_domain"
    assert [wire_key(r) for r in got] == reference(scorer, rollouts)
    m = service.metrics()
    # 49 calls in windows of at most 32 items: two requests; the one holding the bad item is refused (400)
    # and its 32 items go again one by one, so the 31 good ones still get their scores.
    assert metric(m, "reward_requests_total", status="200") == 1 + 31
    assert client.stats.attempts == 2 + 32


def test_two_engine_workers_give_the_same_scores(
    scorer: RewardScorer, rollouts: list[dict[str, Any]]
) -> None:
    # A small batch size makes several batches, so two run at once on the two engine threads.
    running = Running(scorer, window_ms=1.0, engine_workers=2, max_batch_items=6)
    try:

        async def main() -> list[dict[str, Any]]:
            async with RewardClient(running.url) as client:
                return await asyncio.gather(*(client.score_one(**i) for i in rollouts))

        got = [wire_key(r) for r in asyncio.run(main())]
        m = running.metrics()
    finally:
        running.stop()
    assert got == reference(scorer, rollouts)
    assert metric(m, "reward_batch_items_sum") == len(rollouts)
    assert metric(m, "reward_batch_items_count") >= len(rollouts) / 6
    assert metric(m, "reward_requests_total", status="200") == len(rollouts)


def test_instance_ids_resolve_to_gold_ids(scorer: RewardScorer, rollouts: list[dict[str, Any]]) -> None:
    first = rollouts[0]
    index = InstanceIndex({(DOMAIN, "ecommerce-train-000007"): Answer(first["gold_id"])})
    running = Running(scorer, instances=index)
    try:

        async def main() -> tuple[dict[str, Any], str]:
            async with RewardClient(running.url) as client:
                hit = await client.score_one(
                    first["completion"], domain=DOMAIN, instance_id="ecommerce-train-000007"
                )
                with pytest.raises(RewardError) as err:
                    await client.score_one(first["completion"], domain=DOMAIN, instance_id="nope")
                return hit, err.value.code

        hit, code = asyncio.run(main())
        assert hit["total"] == 4.0 and code == "unknown_instance"
    finally:
        running.stop()


# -- load control ----------------------------------------------------------------------------------


def test_overload_gets_429_and_retries_score_every_item_once(
    scorer: RewardScorer, rollouts: list[dict[str, Any]]
) -> None:
    running = Running(scorer, window_ms=10.0, max_queue_items=3, max_concurrent_requests=4, retry_after_s=1)
    try:

        async def main() -> tuple[list[dict[str, Any]], int]:
            async with RewardClient(running.url, max_attempts=60, backoff_s=0.2) as client:
                results = await asyncio.gather(*(client.score_one(**i) for i in rollouts))
                return list(results), client.stats.rejected

        results, rejected = asyncio.run(main())
        m = running.metrics()
    finally:
        running.stop()
    assert [wire_key(r) for r in results] == reference(scorer, rollouts)
    assert rejected > 0
    refused = metric(m, "reward_rejections_total", reason="queue_full") + metric(
        m, "reward_rejections_total", reason="concurrency"
    )
    assert refused == metric(m, "reward_requests_total", status="429") == rejected
    # Every item scored exactly once: none lost, none scored twice.
    assert metric(m, "reward_programs_scored_total", domain=DOMAIN) == len(rollouts)
    assert metric(m, "reward_requests_total", status="200") == len(rollouts)


def test_batch_past_its_deadline_scores_execution_zero(scorer: RewardScorer) -> None:
    # A deadline no batch can meet: programs with phrases never searched (embedding, search, SQL).
    running = Running(scorer, batch_timeout_s=0.0005)
    late = {"sql": "SELECT id FROM products WHERE id IN <text_1>",
            "retrieval_list": [{"type": "text", "field": "title", "query": "a phrase searched for the first time"}]}  # fmt: skip
    try:

        async def main() -> list[dict[str, Any]]:
            async with RewardClient(running.url) as client:
                return await client.score([
                    {"completion": json.dumps(late), "domain": DOMAIN, "gold_id": "P00001"},
                    {"completion": "garbage", "domain": DOMAIN, "gold_id": "P00001"},
                ])  # fmt: skip

        timed_out, garbage = asyncio.run(main())
        assert (timed_out["s_f"], timed_out["s_e"], timed_out["total"]) == (1.0, 0.0, 1.0)
        assert timed_out["timed_out"] is True and timed_out["error"] == "reward_timeout"
        assert (garbage["s_f"], garbage["total"], garbage["timed_out"]) == (0.0, 0.0, False)
        assert metric(running.metrics(), "reward_timeouts_total") == 1.0
    finally:
        running.stop()


def test_restart_mid_run_gives_identical_scores(small_index_cfg: Config, scorer: RewardScorer,
                                                rollouts: list[dict[str, Any]]) -> None:  # fmt: skip
    port = free_port()
    first = Running(scorer, port=port)
    fresh = RewardScorer.open(small_index_cfg, [DOMAIN])  # the restarted service starts cold
    second: Running | None = None

    async def main() -> list[dict[str, Any]]:
        nonlocal second
        out: list[dict[str, Any]] = []
        async with RewardClient(first.url, max_attempts=200, backoff_s=0.05, max_backoff_s=0.3) as client:
            for start in range(0, len(rollouts), 4):
                if start == 16:
                    await asyncio.to_thread(first.stop)  # the service goes away mid-run...

                    async def restart() -> None:
                        nonlocal second
                        await asyncio.sleep(0.5)
                        second = await asyncio.to_thread(Running, fresh, port)  # ...and comes back

                    task = asyncio.create_task(restart())
                out += await client.score(rollouts[start : start + 4])
            await task
            assert client.stats.unavailable > 0
        return out

    try:
        results = asyncio.run(main())
    finally:
        first.stop()
        if second is not None:
            second.stop()
        fresh.close()
    assert [wire_key(r) for r in results] == reference(scorer, rollouts)


# -- malformed requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code", "says"),
    [
        (b"{not json", 422, "bad_request", "JSON"),
        (b'{"items": []}', 422, "bad_request", "items"),
        (b'{"items": [{"domain": "ecommerce", "gold_id": "P1"}]}', 422, "bad_request", "items.0.completion"),
        (
            b'{"items": [{"completion": "x", "domain": "ecommerce", "gold": "P1"}]}',
            422,
            "bad_request",
            "gold",
        ),
        (
            b'{"items": [{"completion": "x", "domain": "ecommerce", "gold_id": "P1", "budget": 0}]}',
            422,
            "bad_request",
            "budget",
        ),
        (
            b'{"items": [{"completion": 7, "domain": "ecommerce", "gold_id": "P1"}]}',
            422,
            "bad_request",
            "completion",
        ),
        (
            b'{"items": [{"completion": "x", "domain": "email", "gold_id": "E1"}]}',
            422,
            "unknown_domain",
            "items[0]",
        ),
        (b'{"items": [{"completion": "x", "domain": "ecommerce"}]}', 422, "no_gold", "items[0]"),
        (
            b'{"items": [{"completion": "x", "domain": "ecommerce", "instance_id": "q"}]}',
            422,
            "unknown_instance",
            "q",
        ),
    ],
)
def test_malformed_requests_get_a_one_line_4xx(
    service: Running, body: bytes, status: int, code: str, says: str
) -> None:
    r = httpx.post(service.url + "/v1/score", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    data = r.json()
    assert data["error"] == code and says in data["detail"] and "\n" not in data["detail"]


def test_too_many_items_is_413(scorer: RewardScorer) -> None:
    running = Running(scorer, max_request_items=2)
    try:
        items = [{"completion": "x", "domain": DOMAIN, "gold_id": "P1"}] * 3
        r = httpx.post(running.url + "/v1/score", json={"items": items})
        assert r.status_code == 413 and r.json()["error"] == "too_large"

        async def main() -> None:
            async with RewardClient(running.url) as client:
                await client.score(items)

        with pytest.raises(RewardError) as err:
            asyncio.run(main())
        assert err.value.code == "too_large"
    finally:
        running.stop()


def test_relevant_ids_and_length_budget_spellings_are_accepted(
    service: Running, rollouts: list[dict[str, Any]]
) -> None:
    first = rollouts[0]
    item = {"completion": first["completion"], "domain": DOMAIN, "gold_id": first["gold_id"],
            "relevant_ids": [first["gold_id"]], "length_budget": 7}  # fmt: skip
    r = httpx.post(service.url + "/v1/score", json={"items": [item]})
    assert r.status_code == 200
    (result,) = r.json()["results"]
    assert result["budget"] == 7 and result["s_l"] == 0.0 and result["total"] == 3.0
