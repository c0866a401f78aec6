"""The layered reward as TRL reward functions, scored in-process or through the reward service.

TRL sums its reward functions; the layered reward is a sum of its gated layers, so each layer is one
function and their sum is exactly R = S_f + S_f·S_e + S_f·S_e·S_r + S_f·S_e·S_r·S_l (DESIGN.md section 5):

- ``format``: S_f; ``execution``: S_f·S_e (its mean is the execution rate);
- ``accuracy``: S_f·S_e·S_r; ``length``: S_f·S_e·S_r·S_l.

TRL logs each function's mean per step (``rewards/<name>/mean``). The four functions share one scoring
call per batch of completions: the first computes, the others read its cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from rl.reward import RewardConfig, RewardItem, RewardScorer

LAYER_NAMES = ("format", "execution", "accuracy", "length")

RewardFunc = Callable[..., list[float]]


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or a conversational list of messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def layers(terms: dict[str, Any]) -> tuple[float, float, float, float]:
    """The four gated layers of one result's terms (``s_f``, ``s_e``, ``s_r``, ``s_l``)."""
    f = float(terms["s_f"])
    e = f * float(terms["s_e"])
    a = e * float(terms["s_r"])
    return f, e, a, a * float(terms["s_l"])


class LayeredReward:
    """Scores batches through ``score`` (items to per-item dicts with ``s_f``..``s_l``) and exposes the layers."""

    def __init__(self, score: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], accuracy: str) -> None:
        self._score = score
        self.accuracy = accuracy
        self._key: tuple[Any, ...] | None = None
        self._rows: list[tuple[float, float, float, float]] = []

    def _items(self, completions: Sequence[Any], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        items = []
        for i, c in enumerate(completions):
            item: dict[str, Any] = {"completion": completion_text(c), "domain": kwargs["domain"][i],
                                    "gold_id": kwargs["gold_id"][i]}  # fmt: skip
            if self.accuracy == "satisfy":
                item["relevant"] = list(kwargs["relevant"][i])
            items.append(item)
        return items

    def layers(self, completions: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[float, float, float, float]]:
        """The four gated layers of each completion; ``kwargs`` holds the reward columns of the RL rows
        (``domain``, ``gold_id``, ``relevant``), one entry per completion, as TRL passes them."""
        items = self._items(completions, kwargs)
        key = tuple((it["completion"], it["domain"], it["gold_id"]) for it in items)
        if key != self._key:
            self._rows = [layers(r) for r in self._score(items)]
            self._key = key
        return self._rows

    def funcs(self) -> list[RewardFunc]:
        """One TRL reward function per layer, named after it."""
        out = []
        for n, name in enumerate(LAYER_NAMES):

            def func(prompts: Any = None, completions: Any = (), n: int = n, **kwargs: Any) -> list[float]:
                return [row[n] for row in self.layers(completions, kwargs)]

            func.__name__ = name
            out.append(func)
        return out


def in_process(scorer: RewardScorer) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Score with a scorer opened on the workspace's indexes (one ``execute_many`` per domain and batch)."""

    def score(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        got = scorer.score([RewardItem(completion=it["completion"], domain=it["domain"], gold_id=it["gold_id"],
                                       relevant=frozenset(it["relevant"]) if "relevant" in it else None)
                            for it in items])  # fmt: skip
        return [r.terms.as_dict() for r in got]

    return score


def remote(url: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Score through the reward service at ``url`` (its async client, with retries)."""
    from rl.reward.client import RewardClient

    async def call(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        async with RewardClient(url) as client:
            return await client.score(items)

    def score(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return asyncio.run(call(items))

    return score


def reward_config(target: str) -> RewardConfig:
    """The reward's configuration for ``--reward-target`` (``hit1``, the paper's, or ``satisfy``, or ``mrr``)."""
    return RewardConfig(accuracy=target)  # type: ignore[arg-type]
