"""The layered reward of DESIGN.md section 5, as pure functions of what a completion did.

* ``S_f`` (format): 1 when the completion parses as a program (:mod:`rl.reward.parse`);
* ``S_e`` (execution): 1 when the program validates, every placeholder resolves and it runs within
  its limits;
* ``S_r`` (accuracy): ``hit1`` 1 when the gold id is at rank 1; ``satisfy`` 1 when the first result
  is in the relevant set; ``mrr`` 1/rank of the gold id (0 below the cut-off);
* ``S_l`` (length): 1 up to the budget, falling linearly to 0 at twice the budget.

They combine as R = S_f + S_f·S_e + S_f·S_e·S_r + S_f·S_e·S_r·S_l, so R is in [0, 4] and each layer
is earned only when the layers before it hold.

The execution credit ``c`` (:attr:`rl.reward.config.RewardConfig.execution_credit`, 1 by default, the
paper's reward) rescales the execution layer of a program that runs and misses: S_f·S_e·(c + (1 - c)·S_r).
At ``c = 0`` a wrong program earns no more for running than for failing, so a policy cannot climb the reward
by executing without answering; an accurate program's reward is 4 whatever ``c`` is.

>>> combine(1, 1, 1, 1), combine(1, 1, 0, 1), combine(1, 0, 1, 1), combine(0, 1, 1, 1)
(4.0, 2.0, 1.0, 0.0)
>>> combine(1, 1, 0, 1, execution_credit=0.0), combine(1, 1, 0, 1, execution_credit=0.25), combine(1, 1, 1, 1, execution_credit=0.0)
(1.0, 1.25, 4.0)
>>> length_term(100, 100), length_term(150, 100), length_term(200, 100)
(1.0, 0.5, 0.0)
>>> accuracy_term(["P2", "P1"], "mrr", gold="P1"), accuracy_term(["P2", "P1"], "hit1", gold="P1")
(0.5, 0.0)
>>> accuracy_term(["P2", "P1"], "satisfy", gold="P1", relevant=frozenset({"P2"}))
1.0
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rl.eval.metrics import DEFAULT_CUTOFF, reciprocal_rank
from rl.reward.config import Accuracy
from rl.reward.errors import RewardError

LAYERS: tuple[str, ...] = ("format", "execution", "accuracy", "length")
"""The four layers in gating order: ``S_f``, ``S_e``, ``S_r``, ``S_l``."""


def gated_layers(
    s_f: float, s_e: float, s_r: float, s_l: float, execution_credit: float = 1.0
) -> tuple[float, float, float, float]:
    """The four layers as they are paid: S_f, S_f·S_e·(c + (1 - c)·S_r), S_f·S_e·S_r, S_f·S_e·S_r·S_l."""
    f, fe = float(s_f), float(s_f) * float(s_e)
    fer = fe * float(s_r)
    c = float(execution_credit)
    return f, fe * (c + (1.0 - c) * float(s_r)), fer, fer * float(s_l)


def combine(s_f: float, s_e: float, s_r: float, s_l: float, *, execution_credit: float = 1.0) -> float:
    """R = S_f + S_f·S_e + S_f·S_e·S_r + S_f·S_e·S_r·S_l (the execution layer rescaled by ``execution_credit``)."""
    return sum(gated_layers(s_f, s_e, s_r, s_l, execution_credit))


def length_term(length: int, budget: int) -> float:
    """``S_l``: 1 up to ``budget``, then linearly down to 0 at ``2 * budget`` and 0 beyond."""
    if budget < 1:
        raise RewardError(f"the length budget must be positive, got {budget}", code="bad_item")
    if length <= budget:
        return 1.0
    return max(0.0, (2 * budget - length) / budget)


def accuracy_term(
    ids: Sequence[str],
    mode: Accuracy,
    *,
    gold: str | None,
    relevant: Collection[str] | None = None,
    cutoff: int = DEFAULT_CUTOFF,
) -> float:
    """``S_r`` of a ranked result. ``satisfy`` counts the gold id as relevant too.

    ``hit1`` and ``mrr`` need ``gold``; ``satisfy`` needs ``relevant`` (a :class:`RewardError`
    ``no_relevant_set`` otherwise, never a silent 0).
    """
    if mode == "satisfy":
        if relevant is None:
            raise RewardError(
                "accuracy 'satisfy' needs the item's relevant set, and the item has none",
                code="no_relevant_set",
            )
        return 1.0 if ids and (ids[0] in relevant or ids[0] == gold) else 0.0
    if gold is None:
        raise RewardError(f"accuracy {mode!r} needs a gold id", code="no_gold")
    if mode == "hit1":
        return 1.0 if ids and ids[0] == gold else 0.0
    return reciprocal_rank(ids, gold, cutoff)


@dataclass(frozen=True)
class Terms:
    """The four terms and their total. ``s_r`` is 0 when the program did not run; ``s_l`` is the
    completion's length score whatever happened (the total gates it)."""

    s_f: float
    s_e: float
    s_r: float
    s_l: float
    execution_credit: float = 1.0
    """What a program that runs and misses earns for running (see the module's docstring)."""

    @property
    def total(self) -> float:
        return combine(self.s_f, self.s_e, self.s_r, self.s_l, execution_credit=self.execution_credit)

    @property
    def failed_layer(self) -> str | None:
        """The first layer not fully earned (``format``, ``execution``, ``accuracy``, ``length``), or None."""
        for layer, value in zip(LAYERS, (self.s_f, self.s_e, self.s_r, self.s_l), strict=True):
            if value < 1.0:
                return layer
        return None

    def as_dict(self) -> dict[str, float]:
        return {"s_f": self.s_f, "s_e": self.s_e, "s_r": self.s_r, "s_l": self.s_l, "total": self.total}
