"""Step 1 of synthesis: sample the logical shape of a query before any field is chosen.

A shape is a tree of ``And`` / ``Or`` / ``Not`` over slots. A slot says what the leaf filled in later
must be for the gold document: ``+`` true, ``-`` false (it sits under a ``Not``), ``?`` free (an
alternative under an ``Or`` whose other branch already holds). Levels follow the paper: L1 has one
condition, L2 two or three, L3 four or five with OR, NOT and two-level nesting.

>>> count_slots(shape_for(3, random.Random(0))) in (4, 5)
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Slot = Literal["+", "-", "?"]


@dataclass(frozen=True)
class SAnd:
    parts: tuple[Shape, ...]


@dataclass(frozen=True)
class SOr:
    parts: tuple[Shape, ...]


@dataclass(frozen=True)
class SNot:
    part: Shape


Shape = Slot | SAnd | SOr | SNot

LEVELS = (1, 2, 3)
LEVEL_SHARES: dict[int, float] = {1: 0.4, 2: 0.4, 3: 0.2}
"""The paper's level mix: ~40% L1, ~40% L2, ~20% L3."""

_L2: tuple[tuple[float, Shape], ...] = (
    (0.40, SAnd(("+", "+"))),
    (0.30, SAnd(("+", "+", "+"))),
    (0.15, SAnd(("+", SNot("-")))),
    (0.15, SAnd(("+", "+", SNot("-")))),
)
# Every L3 shape has an OR and nests a group inside the top-level one; all but the last negate.
_L3: tuple[tuple[float, Shape], ...] = (
    (0.20, SAnd(("+", SOr(("+", "?")), SNot("-")))),
    (0.20, SAnd(("+", "+", SOr(("+", "?")), SNot("-")))),
    (0.15, SAnd(("+", SOr((SAnd(("+", "+")), "?")), SNot("-")))),
    (0.15, SAnd(("+", "+", SNot(SOr(("-", "-")))))),
    (0.15, SAnd(("+", SOr(("+", "?")), SNot(SOr(("-", "-")))))),
    (0.15, SOr((SAnd(("+", "+")), SAnd(("?", "?"))))),
)


def _pick(options: tuple[tuple[float, Shape], ...], rng: random.Random) -> Shape:
    weights = [w for w, _ in options]
    return rng.choices([s for _, s in options], weights=weights, k=1)[0]


def shape_for(level: int, rng: random.Random) -> Shape:
    """A random shape of ``level`` (1, 2 or 3)."""
    if level == 1:
        return "+"
    if level == 2:
        return _pick(_L2, rng)
    if level == 3:
        return _pick(_L3, rng)
    raise ValueError(f"level must be 1, 2 or 3, got {level}")


def count_slots(shape: Shape) -> int:
    """Number of leaf conditions the shape asks for."""
    if isinstance(shape, str):
        return 1
    if isinstance(shape, SNot):
        return count_slots(shape.part)
    return sum(count_slots(p) for p in shape.parts)


def quotas(total: int, shares: dict[int, float] = LEVEL_SHARES) -> dict[int, int]:
    """Split ``total`` over levels by ``shares`` with largest remainders, so the parts sum to ``total``.

    >>> quotas(10), quotas(7)
    ({1: 4, 2: 4, 3: 2}, {1: 3, 2: 3, 3: 1})
    """
    raw = {lvl: total * share for lvl, share in shares.items()}
    out = {lvl: int(v) for lvl, v in raw.items()}
    rest = total - sum(out.values())
    for lvl in sorted(raw, key=lambda k: (-(raw[k] - out[k]), k))[:rest]:
        out[lvl] += 1
    return out
