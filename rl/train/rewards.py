"""The layered reward as TRL reward functions, scored in-process or through the reward service.

TRL sums its reward functions; the layered reward is a sum of its gated layers, so each layer is one
function and their sum is exactly R = S_f + S_f·S_e + S_f·S_e·S_r + S_f·S_e·S_r·S_l (DESIGN.md section 5):

- ``format``: S_f; ``execution``: S_f·S_e (its mean is the execution rate), or S_f·S_e·(c + (1 - c)·S_r)
  under an execution credit ``c`` below 1 (:func:`rl.reward.terms.gated_layers`);
- ``accuracy``: S_f·S_e·S_r; ``length``: S_f·S_e·S_r·S_l.

TRL logs each function's mean per step (``rewards/<name>/mean``). The four functions share one scoring
call per batch of completions: the first computes, the others read its cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from rl.reward import RewardConfig, RewardItem, RewardScorer
from rl.reward.terms import gated_layers

LAYER_NAMES = ("format", "execution", "accuracy", "length")

RewardFunc = Callable[..., list[float]]


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or a conversational list of messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def layers(terms: dict[str, Any], execution_credit: float = 1.0) -> tuple[float, float, float, float]:
    """The four gated layers of one result's terms (``s_f``, ``s_e``, ``s_r``, ``s_l``)."""
    return gated_layers(terms["s_f"], terms["s_e"], terms["s_r"], terms["s_l"], execution_credit)


class LayeredReward:
    """Scores batches through ``score`` (items to per-item dicts with ``s_f``..``s_l``) and exposes the layers.

    The layers are paid here from the four terms, so ``execution_credit`` applies whether the terms come
    from an in-process scorer or from a reward service configured otherwise."""

    def __init__(
        self,
        score: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        accuracy: str,
        execution_credit: float = 1.0,
    ) -> None:
        RewardConfig(execution_credit=execution_credit)  # the one check of its range
        self._score = score
        self.accuracy = accuracy
        self.execution_credit = execution_credit
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

    def layers(
        self, completions: Sequence[Any], kwargs: dict[str, Any]
    ) -> list[tuple[float, float, float, float]]:
        """The four gated layers of each completion; ``kwargs`` holds the reward columns of the RL rows
        (``domain``, ``gold_id``, ``relevant``), one entry per completion, as TRL passes them."""
        items = self._items(completions, kwargs)
        key = tuple((it["completion"], it["domain"], it["gold_id"]) for it in items)
        if key != self._key:
            self._rows = [layers(r, self.execution_credit) for r in self._score(items)]
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


def reward_config(target: str, execution_credit: float = 1.0) -> RewardConfig:
    """The reward's configuration for ``--reward-target`` (``hit1``, the paper's, or ``satisfy``, or ``mrr``)
    and ``--execution-credit``."""
    return RewardConfig(accuracy=target, execution_credit=execution_credit)  # type: ignore[arg-type]
