"""verl's custom reward function: a thin async client of the shared reward service.

verl 0.9 loads it with ``reward.custom_reward_function.path=pkg://rl.verl.reward_fn`` and
``reward.custom_reward_function.name=compute_score``; its reward loop awaits one ``compute_score`` task per
sample, and those concurrent calls reach the service, which coalesces them into ``execute_many`` batches.
No reward is computed here: the one definition lives in :mod:`rl.reward` behind ``POST /v1/score``.

The service URL comes from, in order: the ``reward_url`` keyword (verl passes
``reward.custom_reward_function.reward_kwargs.*`` as keywords), the ``PRORE_REWARD_URL`` environment
variable, :data:`DEFAULT_URL`.

The returned dict has ``score`` (R, in [0, 4]) and the four terms, which verl logs as reward metrics
(``s_f`` validity, ``s_e`` executability, ``s_r`` accuracy, ``s_l`` length).
"""

from __future__ import annotations

import asyncio
import os
import random
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from rl.verl.errors import TrainError
from rl.verl.export import domain_of

URL_ENV = "PRORE_REWARD_URL"
DEFAULT_URL = "http://127.0.0.1:8300"
SCORE_PATH = "/v1/score"
TERMS = ("s_f", "s_e", "s_r", "s_l")


class RewardServiceError(TrainError):
    """The reward service refused an item (4xx other than 429) or stayed unreachable after every retry."""

    code = "reward_service"


@dataclass(frozen=True)
class RetryPolicy:
    """How a call to the service is retried: 429 (honouring ``Retry-After``), 5xx and lost connections.

    Retrying is safe because the service scores an item the same way whatever batch it lands in.
    """

    attempts: int = 10
    """Tries in all, the first included."""
    base_delay_s: float = 0.05
    """Delay before the first retry; each retry doubles it, with jitter so that workers spread out."""
    max_delay_s: float = 5.0
    """Longest wait between two tries (a longer ``Retry-After`` is cut to this)."""
    timeout_s: float = 60.0
    """Time limit of one HTTP request, connection included."""

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0**attempt) * (0.5 + random.random() / 2)
        return float(min(self.max_delay_s, max(backoff, retry_after or 0.0)))


DEFAULT_RETRY = RetryPolicy()

# One connection pool per event loop and URL: verl's reward workers each run one loop and share it
# across their per-sample tasks; a client must not outlive or cross its loop.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


def service_url(reward_url: str | None = None) -> str:
    """The reward service's base URL (see the module docstring for the order)."""
    return (reward_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def _client(url: str, policy: RetryPolicy) -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    client = per_loop.get(url)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(base_url=url, timeout=policy.timeout_s)
        per_loop[url] = client
    return client


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers.get("retry-after", ""))
    except ValueError:
        return None


def score_item(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The service's request item for one verl sample: the completion, its domain, the gold id, and the
    instance id, relevant set and length budget when the row carries them."""
    info = extra_info or {}
    item: dict[str, Any] = {"completion": solution_str, "domain": domain_of(data_source), "gold_id": ground_truth}
    if info.get("instance_id"):
        item["instance_id"] = str(info["instance_id"])
    if info.get("relevant_ids") is not None:
        item["relevant_ids"] = [str(x) for x in info["relevant_ids"]]
    if info.get("length_budget") is not None:
        item["length_budget"] = int(info["length_budget"])
    return item


async def score_items(
    items: list[dict[str, Any]], *, url: str | None = None, policy: RetryPolicy = DEFAULT_RETRY
) -> list[dict[str, Any]]:
    """POST ``items`` to the service and return its per-item results, retrying as ``policy`` says."""
    base = service_url(url)
    client = _client(base, policy)
    last = "no attempt made"
    for attempt in range(policy.attempts):
        retry_after: float | None = None
        try:
            resp = await client.post(SCORE_PATH, json={"items": items})
        except httpx.TransportError as exc:  # refused, reset, timed out: the service may be restarting
            last = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code == 200:
                results: list[dict[str, Any]] = resp.json()["results"]
                if len(results) != len(items):
                    raise RewardServiceError(f"{base} answered {len(results)} results for {len(items)} items")
                return results
            if resp.status_code != 429 and resp.status_code < 500:
                raise RewardServiceError(f"{base} refused the request ({resp.status_code}): {resp.text[:300]}")
            last = f"HTTP {resp.status_code}"
            retry_after = _retry_after(resp)
        if attempt + 1 < policy.attempts:
            await asyncio.sleep(policy.delay(attempt, retry_after))
    raise RewardServiceError(f"the reward service at {base} did not answer after {policy.attempts} tries ({last})")


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    reward_url: str | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """The reward of one verl sample, as verl's reward loop calls it (extra keywords are ignored)."""
    item = score_item(data_source, solution_str, ground_truth, extra_info)
    (result,) = await score_items([item], url=reward_url)
    return {"score": float(result["total"]), **{t: float(result[t]) for t in TERMS}}
