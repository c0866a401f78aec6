"""verl's custom reward function: a thin async client of the shared reward service.

verl 0.9 loads it with ``reward.custom_reward_function.path=pkg://rl.verl.reward_fn`` and
``reward.custom_reward_function.name=compute_score``; its reward loop awaits one ``compute_score`` task per
sample. A worker's client gathers the calls made within :data:`BATCH_WINDOW_MS` into one request, and the
service coalesces the requests into ``execute_many`` batches.
No reward is computed here: the one definition lives in :mod:`rl.reward` behind ``POST /v1/score``.

The service URL comes from the ``reward_url`` keyword (verl passes
``reward.custom_reward_function.reward_kwargs.*`` as keywords, and ``prore train launch --reward-url`` sets
it), else from the ``PRORE_REWARD_URL`` environment variable of the worker. Retries and backoff are
:class:`rl.reward.client.RewardClient`'s: connection failures, 429 (after ``Retry-After``) and 5xx are
retried, which is safe because the service scores an item the same way in any batch; a 4xx raises
:class:`rl.reward.RewardError` with the service's reason.

The returned dict has ``score`` (R, in [0, 4]) and the four terms, which verl logs as reward metrics
(``s_f`` validity, ``s_e`` executability, ``s_r`` accuracy, ``s_l`` length).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import Any

from rl.reward.client import RewardClient
from rl.reward.settings import URL_ENV
from rl.verl.export import domain_of

__all__ = ["BATCH_WINDOW_MS", "TERMS", "URL_ENV", "client_for", "compute_score", "score_item"]

TERMS = ("s_f", "s_e", "s_r", "s_l")

# One client (one connection pool) per event loop and URL: each of verl's reward workers runs one loop
# and shares it across its per-sample tasks; an aiohttp session must not cross loops.
_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str | None, float], RewardClient]
] = weakref.WeakKeyDictionary()


BATCH_WINDOW_MS = 2.0
"""How long a worker's client gathers its samples' calls into one request (``reward_kwargs.batch_window_ms``
overrides it; 0 sends one request per sample). Measured by ``bench/reward.py`` (README: the reward service)."""


def client_for(reward_url: str | None = None, batch_window_ms: float = BATCH_WINDOW_MS) -> RewardClient:
    """The running loop's client of the service at ``reward_url`` (None: ``PRORE_REWARD_URL``), batching the
    calls made within ``batch_window_ms``."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (reward_url, float(batch_window_ms))
    client = per_loop.get(key)
    if client is None:
        client = per_loop[key] = RewardClient(reward_url, batch_window_ms=float(batch_window_ms))
    return client


def score_item(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The service's request item for one verl sample: the completion, its domain and gold id (the row's
    ``ground_truth``), and the relevant set and length budget when the row carries them.

    The instance id stays out: the gold id is all the reward needs, so the service scores the row
    whether or not it loaded that benchmark.
    """
    info = extra_info or {}
    item: dict[str, Any] = {
        "completion": solution_str,
        "domain": domain_of(data_source),
        "gold_id": ground_truth,
    }
    if info.get("relevant_ids") is not None:
        item["relevant"] = [str(x) for x in info["relevant_ids"]]
    if info.get("length_budget") is not None:
        item["budget"] = int(info["length_budget"])
    return item


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    reward_url: str | None = None,
    batch_window_ms: float = BATCH_WINDOW_MS,
    **kwargs: Any,
) -> dict[str, float]:
    """The reward of one verl sample, as verl's reward loop calls it (extra keywords are ignored). The
    worker's concurrent calls leave in batches (:data:`BATCH_WINDOW_MS`)."""
    item = score_item(data_source, solution_str, ground_truth, extra_info)
    result = await client_for(reward_url, batch_window_ms).score_item(item)
    return {"score": float(result["total"]), **{t: float(result[t]) for t in TERMS}}
