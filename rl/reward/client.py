"""An async client of the reward service, with retries: what trainers, the benchmark and verl's
reward function call.

Scores are deterministic, so any request whose answer did not arrive is safe to send again. The
client retries connection failures, 429 and 5xx answers, waiting what ``Retry-After`` says or, when
the service says nothing, an exponential backoff with jitter. A 4xx other than 429 is the caller's
mistake and raises :class:`~rl.reward.RewardError` at once with the service's one-line reason.

The client is built on ``aiohttp``: on this project's 2-core machine, 8 clients sending 8,192 one-item
requests took about 12 s through aiohttp against about 61 s through ``httpx.AsyncClient`` (a cached
completion, so the service's own work was the same; ``bench/reward.py`` measures the whole path). A
trainer sends one request per sample, so the client's cost per request is the reward's floor.

>>> import asyncio
>>> async def main():  # doctest: +SKIP
...     async with RewardClient("http://127.0.0.1:8300") as client:
...         return await client.score_one(completion, domain="ecommerce", instance_id="ecommerce-train-000001")
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from core.openai_client import RetryPolicy, retry_after_s
from rl.reward.errors import RewardError, RewardUnavailable
from rl.reward.settings import URL_ENV


@dataclass
class ClientStats:
    """What a client went through: requests sent, answers that were retried, and why."""

    attempts: int = 0
    retries: int = 0
    rejected: int = 0
    """429 answers."""
    unavailable: int = 0
    """Connection failures and 5xx answers."""


class RewardClient:
    """Scores items through ``POST /v1/score`` on ``base_url`` (default: the ``PRORE_REWARD_URL`` environment)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 120.0,
        max_attempts: int = 12,
        backoff_s: float = 0.05,
        max_backoff_s: float = 5.0,
        max_connections: int = 64,
        batch_window_ms: float = 0.0,
        max_batch_items: int = 256,
    ) -> None:
        url = base_url or os.environ.get(URL_ENV)
        if not url:
            raise RewardError(f"no reward service URL: pass one or set {URL_ENV}", code="no_reward_url")
        if max_attempts < 1:
            raise RewardError(f"max_attempts must be positive, got {max_attempts}", code="bad_reward_config")
        if max_connections < 1:
            raise RewardError(
                f"max_connections must be positive, got {max_connections}", code="bad_reward_config"
            )
        if batch_window_ms < 0 or max_batch_items < 1:
            raise RewardError(
                f"batch_window_ms must be >= 0 and max_batch_items positive, got {batch_window_ms} and "
                f"{max_batch_items}",
                code="bad_reward_config",
            )
        self.base_url = url.rstrip("/")
        self.retry = RetryPolicy(max_attempts=max_attempts, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        """When a refused or unanswered call is tried again: the project's one policy
        (:class:`core.openai_client.RetryPolicy`: ``Retry-After`` honoured, full jitter otherwise)."""
        self.stats = ClientStats()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.batch_window_s = batch_window_ms / 1000
        self.max_batch_items = max_batch_items
        self._pending: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def _http(self) -> aiohttp.ClientSession:
        # Made on first use: an aiohttp session belongs to the event loop that is running when it is made.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self._session

    async def __aenter__(self) -> RewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Send what is waiting for its batch, wait for every batch in flight, then close the connections."""
        self._flush()
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def score(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Per-item results (terms, total, error, ids, length, timings) for ``items``, in order."""
        body = {"items": [dict(item) for item in items]}
        url = self.base_url + "/v1/score"
        last = "no attempt made"
        for attempt in range(1, self.retry.max_attempts + 1):
            self.stats.attempts += 1
            wait: float | None = None
            try:
                async with self._http().post(url, json=body) as response:
                    status = response.status
                    if status == 200:
                        results: list[dict[str, Any]] = (await response.json())["results"]
                        if len(results) != len(items):
                            raise RewardError(
                                f"{len(results)} results for {len(items)} items", code="bad_response"
                            )
                        return results
                    reason = _reason(await response.read(), response.reason)
                    wait = retry_after_s(response.headers.get("Retry-After"))
            except (aiohttp.ClientError, TimeoutError) as exc:
                # A connection refused or reset, a request past its time: no answer, so a retry is safe.
                self.stats.unavailable += 1
                last = f"{type(exc).__name__}: {exc}"
            else:
                if not RetryPolicy.retries_status(status):
                    code, detail = reason
                    raise RewardError(
                        f"the reward service refused the request ({status}): {detail}", code=code
                    )
                if status == 429:
                    self.stats.rejected += 1
                else:
                    self.stats.unavailable += 1
                last = f"{status} {reason[0]}: {reason[1]}"
            if attempt == self.retry.max_attempts:
                break
            self.stats.retries += 1
            await asyncio.sleep(self.retry.delay(attempt, wait))
        raise RewardUnavailable(
            f"the reward service did not answer after {self.retry.max_attempts} attempts ({last})"
        )

    async def score_one(
        self,
        completion: str,
        *,
        domain: str,
        instance_id: str | None = None,
        gold_id: str | None = None,
        relevant: Sequence[str] | None = None,
        budget: int | None = None,
    ) -> dict[str, Any]:
        """One completion's result (one request; the service batches it with its neighbours)."""
        item: dict[str, Any] = {"completion": completion, "domain": domain}
        for key, value in (("instance_id", instance_id), ("gold_id", gold_id), ("budget", budget)):
            if value is not None:
                item[key] = value
        if relevant is not None:
            item["relevant"] = list(relevant)
        return await self.score_item(item)

    async def score_item(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """One item's result: a request of its own, or, with ``batch_window_ms``, its share of the batch of
        the calls made within the window."""
        if self.batch_window_s <= 0:
            return (await self.score([item]))[0]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending.append((dict(item), future))
        if len(self._pending) >= self.max_batch_items:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.batch_window_s, self._flush)
        return await future

    def _flush(self) -> None:
        """Send the items waiting for a batch as one request (a task; its callers await their futures)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: Sequence[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]]) -> None:
        try:
            results = await self.score([item for item, _ in batch])
        except RewardError as exc:
            if len(batch) == 1 or isinstance(exc, RewardUnavailable):
                _settle([f for _, f in batch], exc)
                return
            # A refusal names one bad item, and would fail its neighbours: each item goes alone.
            await asyncio.gather(*(self._send([one]) for one in batch))
            return
        except BaseException as exc:  # cancelled, or a bug: no caller may wait forever
            _settle([f for _, f in batch], exc)
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


def _settle(futures: Sequence[asyncio.Future[Any]], exc: BaseException) -> None:
    for future in futures:
        if future.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)


def _reason(body: bytes, phrase: str | None) -> tuple[str, str]:
    """The service's ``(error, detail)`` from an error answer's body (anything else: the body's start)."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return "http_error", text[:200] or (phrase or "")
    if isinstance(data, dict):
        return str(data.get("error", "http_error")), str(data.get("detail", data))
    return "http_error", str(data)[:200]
