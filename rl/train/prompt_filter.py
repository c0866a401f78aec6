"""Keep the prompts GRPO can learn from: DAPO's dynamic sampling, done once before training.

A GRPO group whose G rewards are all equal has an advantage of zero for every completion: it costs a
generation, a forward and a backward, and moves nothing (with DAPO's token-level loss it also dilutes
the others). DAPO (Yu et al., 2025, *DAPO: An Open-Source LLM Reinforcement Learning System at Scale*,
section 3.2, "Dynamic Sampling") over-samples and drops the groups whose accuracy is 0 or 1, so that
every batch is full of groups with a signal. TRL 1.16 has no such option.

An SFT planner sees its own training prompts again in RL, so most of its groups are all right or all
wrong (``prompt_filter.json`` of a run says how many). This pass samples the initial model ``G`` times
per training prompt at the RL temperature and budget, in one offline vLLM batch, scores the completions
with the same layered reward, and keeps the prompts whose rewards differ (``filter_on: reward``) or,
by DAPO's own rule, whose samples are neither all accurate nor all wrong (``filter_on: accuracy``). The
first keeps groups whose wrong programs differ only in whether they execute; on the medium run they
taught the planner to execute more, not to hit more (README, "Training the planner"). It is DAPO's filter applied
once, against the initial policy, rather than online against each step's policy: the policy moves
little in a few hundred steps at RL learning rates, and the offline pass costs one vLLM batch instead of
a generation per dropped group. The gold is seen only by the reward, as in training.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from indexing.workspace import atomic_write_json
from rl.errors import TrainError
from rl.train.config import FILTER_ON, FilterOn

FILTER_FILE = "prompt_filter.json"
"""Where a run records the filter's outcome and the kept prompts (read back when the run resumes)."""
SCORE_CHUNK = 512
"""Completions scored per reward call (one ``execute_many`` per domain and chunk)."""
SAME = 1e-9
"""Rewards closer than this are one value (the length term is a float)."""


@dataclass(frozen=True)
class FilterStats:
    """What the filter saw: groups by outcome, and the kept share."""

    pool: int
    """Prompts sampled."""
    kept: int
    """Prompts with a signal: their G rewards (or, ``on="accuracy"``, their accuracies) differ."""
    solved: int
    """Groups whose every completion earned the accuracy layer (nothing left to learn)."""
    unsolved: int
    """Groups not kept with no accurate completion (no signal yet)."""
    samples: int
    temperature: float
    on: FilterOn
    """What had to differ within a kept group: ``reward`` or ``accuracy``."""
    mean_reward: float
    """Mean total reward of the samples: the initial policy's, at the RL temperature."""
    seconds: float


def varied(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards differ, so that its advantages are not all zero.

    >>> varied([4.0, 4.0, 4.0, 4.0]), varied([1.0, 4.0, 4.0, 4.0]), varied([3.9, 3.9000000001])
    (False, True, False)
    """
    return max(rewards) - min(rewards) > SAME


def select(groups: Sequence[Sequence[float]], accurate: Sequence[Sequence[bool]], *,
           temperature: float, on: FilterOn = "reward") -> tuple[list[int], FilterStats]:  # fmt: skip
    """The indices of the groups with a signal, and the counts of the rest: by ``on="reward"`` a group
    whose rewards differ (:func:`varied`), by ``on="accuracy"`` one with accurate and inaccurate samples.

    >>> groups = [[4, 4], [1, 4], [1, 1], [1, 2]]
    >>> accurate = [[True, True], [False, True], [False, False], [False, False]]
    >>> kept, stats = select(groups, accurate, temperature=1.0)
    >>> kept, stats.solved, stats.unsolved
    ([1, 3], 1, 1)
    >>> kept, stats = select(groups, accurate, temperature=1.0, on="accuracy")
    >>> kept, stats.solved, stats.unsolved
    ([1], 1, 2)
    """
    if len(groups) != len(accurate):
        raise TrainError("one accuracy row per reward group is needed", code="train_filter")
    if on not in FILTER_ON:
        raise TrainError(
            f"the prompt filter keeps groups on {' or '.join(FILTER_ON)}, not {on!r}", code="train_filter"
        )
    signal = [varied(g) if on == "reward" else len(set(a)) > 1 for g, a in zip(groups, accurate, strict=True)]
    kept = [i for i, v in enumerate(signal) if v]
    same = [i for i, v in enumerate(signal) if not v]
    flat = [r for g in groups for r in g]
    stats = FilterStats(
        pool=len(groups),
        kept=len(kept),
        solved=sum(1 for i in same if all(accurate[i])),
        unsolved=sum(1 for i in same if not any(accurate[i])),
        samples=len(groups[0]) if groups else 0,
        temperature=temperature,
        on=on,
        mean_reward=round(sum(flat) / len(flat), 4) if flat else 0.0,
        seconds=0.0,
    )
    return kept, stats


def sample(
    init: Path, prompts: Sequence[Any], *, n: int, temperature: float, max_tokens: int
) -> list[list[str]]:
    """``n`` completions of the model at ``init`` for each chat of ``prompts``, in one offline vLLM batch.

    The chats are rendered with the model's chat template, as TRL renders the RL rows' prompts. Samples
    draw from the engine's seed (a per-request seed with n > 1 stops vLLM 0.32's CPU worker)."""
    import os

    from vllm import SamplingParams

    from rl.eval.planner_methods import close_llm, open_llm

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    llm = open_llm(init)
    try:
        tok = llm.get_tokenizer()
        texts = [
            tok.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True) for p in prompts
        ]
        params = SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens)
        return [[c.text for c in o.outputs] for o in llm.generate(texts, params, use_tqdm=True)]
    finally:
        close_llm(llm)


def filter_rows(rows: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]],
                score: Callable[[Sequence[str], dict[str, list[Any]]], list[tuple[float, float, float, float]]],
                *, temperature: float, on: FilterOn = "reward") -> tuple[list[dict[str, Any]], FilterStats]:  # fmt: skip
    """The RL rows whose sampled ``completions`` earned differing rewards (or accuracy, ``on``) under ``score`` (a batch of
    completions and their reward columns to the four gated layers, :meth:`rl.train.rewards.LayeredReward.layers`)."""
    from tqdm.auto import tqdm

    flat = [(i, c) for i, group in enumerate(completions) for c in group]
    got: list[tuple[float, float, float, float]] = []
    for start in tqdm(range(0, len(flat), SCORE_CHUNK), desc="scoring samples", unit="chunk"):
        part = flat[start : start + SCORE_CHUNK]
        columns = {key: [rows[i][key] for i, _ in part] for key in ("domain", "gold_id", "relevant")}
        got.extend(score([c for _, c in part], columns))
    groups: list[list[float]] = [[] for _ in completions]
    accurate: list[list[bool]] = [[] for _ in completions]
    for (i, _), layer in zip(flat, got, strict=True):
        groups[i].append(sum(layer))
        accurate[i].append(layer[2] > 0)
    kept, stats = select(groups, accurate, temperature=temperature, on=on)
    return [rows[i] for i in kept], stats


def row_key(row: dict[str, Any]) -> str:
    """A training row's identity across domains."""
    return f"{row['domain']}/{row['qid']}"


def pool_digest(rows: Sequence[dict[str, Any]]) -> str:
    """A short digest of the rows sampled, so that a saved filter is reused only for the same pool."""
    import hashlib

    return hashlib.sha256("\n".join(row_key(r) for r in rows).encode()).hexdigest()[:16]


def filter_key(init: Path, rows: Sequence[dict[str, Any]], *, samples: int, temperature: float, max_tokens: int,
               target: str, on: FilterOn = "reward", execution_credit: float = 1.0) -> dict[str, Any]:  # fmt: skip
    """What a filter's outcome depends on: the initial model, the pool of rows, the sampling and the rule
    (and the execution credit when it is not the paper's 1, so the records of earlier runs still match)."""
    key = {"init": str(init.resolve()), "pool": pool_digest(rows), "samples": samples, "temperature": temperature,
           "max_tokens": max_tokens, "target": target, "on": on}  # fmt: skip
    if execution_credit != 1.0:
        key["execution_credit"] = execution_credit
    return key


def saved_filter(out: Path, key: dict[str, Any]) -> set[str] | None:
    """The kept rows' identities recorded in ``out``'s :data:`FILTER_FILE` for the same ``key`` (the
    init model, pool and sampling), so that a resumed run trains on the same prompts; else None."""
    path = out / FILTER_FILE
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    return set(saved["kept"]) if saved.get("key") == key else None


def recorded_rows(rows: Sequence[dict[str, Any]], kept: set[str], out: Path, on: str) -> list[dict[str, Any]]:
    """The ``rows`` a filter recorded in ``out`` kept (:func:`saved_filter`), said in one line."""
    picked = [r for r in rows if row_key(r) in kept]
    print(f"prompt filter ({on}): kept {len(picked)} of {len(rows)} prompts, as recorded in {out / FILTER_FILE} "
          "for this model and pool")  # fmt: skip
    return picked


def record_filter(out: Path, key: dict[str, Any], kept: Sequence[dict[str, Any]], stats: FilterStats) -> None:
    """Write the filter's outcome to ``out``'s :data:`FILTER_FILE` and say it in one line."""
    atomic_write_json(
        out / FILTER_FILE, {"key": key, "stats": asdict(stats), "kept": [row_key(r) for r in kept]}
    )
    print(f"prompt filter ({stats.on}): kept {stats.kept} of {stats.pool} prompts ({stats.solved} solved and "
          f"{stats.unsolved} unsolved by all {stats.samples} samples), mean sampled reward "
          f"{stats.mean_reward}, {stats.seconds} s")  # fmt: skip
