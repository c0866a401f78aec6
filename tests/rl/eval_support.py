"""Evaluation instances made up for the report and comparison tests: no benchmark, no index."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Inst:
    qid: str
    nl: str
    program: str
    gold_id: str
    level: str
    modalities: tuple[str, ...]
    relevant_n: int | None = None
    relevant_ids: tuple[str, ...] = ()


def instances(n: int) -> list[Inst]:
    """``n`` instances spread over the three levels and four modality mixes, gold ids ``P00000``..."""
    mods = [("structured",), ("structured", "text"), ("image", "structured"), ("image", "text")]
    return [
        Inst(f"q{i:03d}", f"request {i}", "{}", f"P{i:05d}", ("L1", "L2", "L3")[i % 3], mods[i % 4])
        for i in range(n)
    ]
