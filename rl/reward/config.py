"""What the reward is configured with: the accuracy term's mode, the length budget and the ranking depth.

Every default here is the paper's or DESIGN.md section 5's; a field's docstring says where it comes from.

>>> RewardConfig().accuracy, RewardConfig().budget("chars"), RewardConfig().budget("tokens")
('hit1', 2048, 512)
>>> RewardConfig(accuracy="top5")
Traceback (most recent call last):
...
rl.reward.errors.RewardError: accuracy must be one of hit1, satisfy, mrr, got 'top5'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from rl.eval.metrics import DEFAULT_CUTOFF
from rl.reward.errors import RewardError

Accuracy = Literal["hit1", "satisfy", "mrr"]
ACCURACY_MODES: tuple[Accuracy, ...] = get_args(Accuracy)
"""``hit1``: the gold id at rank 1 (the paper's default); ``satisfy``: the first result is in the
instance's relevant set; ``mrr``: 1/rank of the gold id within the top :attr:`RewardConfig.cutoff`."""

LengthUnit = Literal["tokens", "chars"]


@dataclass(frozen=True)
class RewardConfig:
    """How the four terms of DESIGN.md section 5 are computed."""

    accuracy: Accuracy = "hit1"
    """What ``S_r`` measures: ``hit1`` (the gold id at rank 1, the paper's), ``satisfy`` (the first result is in
    the instance's relevant set) or ``mrr`` (1/rank of the gold id within the top ``cutoff``)."""
    budget_tokens: int = 512
    """``S_l``'s budget when a tokenizer counts the completion: 1 up to this many tokens, falling
    linearly to 0 at twice as many (DESIGN.md section 5). A program is about 44 tokens, so this leaves
    room for a ``<think>`` block."""
    budget_chars: int = 2048
    """``S_l``'s budget in characters, used when no tokenizer counts the completion (about 4 characters a
    token)."""
    cutoff: int = DEFAULT_CUTOFF
    """Depth the program's result is ranked to (the paper's K); ``mrr`` scores 0 below it."""
    top_ids: int = 10
    """How many of the executed program's top ids a result reports."""
    execution_credit: float = 1.0
    """The share of the execution layer a program that runs and misses still earns, in [0, 1]: 1 is the
    paper's reward (2 of 4 points for running), 0 pays execution only with accuracy (R is 1 for a wrong
    program that runs, as for one that fails). An accurate program earns 4 either way."""

    def __post_init__(self) -> None:
        if self.accuracy not in ACCURACY_MODES:
            raise RewardError(
                f"accuracy must be one of {', '.join(ACCURACY_MODES)}, got {self.accuracy!r}",
                code="bad_reward_config",
            )
        for name in ("budget_tokens", "budget_chars", "cutoff"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RewardError(
                    f"{name} must be a positive integer, got {value!r}", code="bad_reward_config"
                )
        c = self.execution_credit
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0.0 <= c <= 1.0:
            raise RewardError(
                f"execution_credit must be a number from 0 to 1, got {c!r}", code="bad_reward_config"
            )
        if self.top_ids < 0 or self.top_ids > self.cutoff:
            raise RewardError(
                f"top_ids must be between 0 and cutoff ({self.cutoff}), got {self.top_ids}",
                code="bad_reward_config",
            )

    def budget(self, unit: LengthUnit) -> int:
        """The length budget in ``unit``."""
        return self.budget_tokens if unit == "tokens" else self.budget_chars
