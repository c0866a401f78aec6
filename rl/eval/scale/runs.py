"""What a scaling run is: its corpus sizes and labels, the planning candidates it compares, and the constants
and small helpers the other modules of :mod:`rl.eval.scale` share."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexing.config import Config

DOMAIN = "ecommerce"
K = 20
"""The fixed result width and every entry's default width (the paper's K)."""
BUILD_STAGES = ("generate", "clickhouse", "embed", "milvus", "bm25", "total")
LEVELS = ("L1", "L2", "L3")
GOAL_P50_MS = 50.0
"""The latency goal: p50 at most this per level at 1M products..."""
GOAL_P95_MS = 100.0
"""... and p95 at most this."""
GOAL_P1_RATIO = 0.95
"""The quality goal: the default engine's P@1 at the largest size at least this share of its P@1 at the smallest."""
GOAL_EMPTY = 0.01
"""The empty-answer goal: at most this share of the benchmark's programs return nothing, at every size."""
DEFAULT_CANDIDATE = "conditional_pushdown"
"""The candidate that is the engine's default planning (``serving.planning``'s defaults)."""
RESULT_FILE = "result.json"
"""A run's results, in its workspace."""
BUILD_FILE = "build.json"
"""A run's build record, in its workspace: a later invocation reuses the build with its numbers."""


def size_label(n: int) -> str:
    """``5000`` -> ``5k``, ``1000000`` -> ``1M``, ``2500`` -> ``2500``."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


@dataclass(frozen=True)
class Run:
    """One configuration: an embedder at a corpus size."""

    embedder: str
    docs: int

    @property
    def label(self) -> str:
        return f"{self.embedder} {size_label(self.docs)}"

    def workspace(self, root: Path) -> Path:
        """This run's own workspace below ``root``."""
        return root / f"{self.embedder}-{size_label(self.docs)}"


@dataclass(frozen=True)
class Candidate:
    """One way of planning retrieval: ``planning`` holds the ``serving.planning`` options it sets."""

    name: str
    label: str
    planning: Mapping[str, Any]


HEAD_5K: Mapping[str, Any] = {
    "pushdown": True,
    "adaptive_k": False,
    "conditional": True,
    "chain_head_docs": 5000,
    "chain_head_max": 400,
}
"""Conditional + pushdown with the chain's head read at 5k documents, at most 400: what the candidates below vary."""

CANDIDATES: tuple[Candidate, ...] = (
    Candidate("fixed", "fixed K=20", {"mode": "fixed-k"}),
    Candidate("pushdown", "filter pushdown", {"pushdown": True, "adaptive_k": False, "conditional": False}),
    Candidate("adaptive", "adaptive K", {"pushdown": False, "adaptive_k": True, "conditional": False}),
    Candidate("both", "pushdown + adaptive K", {"pushdown": True, "adaptive_k": True, "conditional": False}),
    Candidate("conditional", "conditional", {"pushdown": False, "adaptive_k": False, "conditional": True}),
    Candidate(
        "conditional_pushdown",
        "the default: conditional + pushdown, a head read at 5k documents (at most 400), chains within disjuncts, tapered",
        {**HEAD_5K, "conditional_branches": True, "chain_taper": True},
    ),
    Candidate(
        "head_only",
        "conditional + pushdown, a head read at 5k documents, at most 400 (the default before chains within disjuncts)",
        {**HEAD_5K, "conditional_branches": False, "chain_taper": False},
    ),
    Candidate(
        "taper",
        "the head only, and a tapered chain (chain_taper)",
        {**HEAD_5K, "conditional_branches": False, "chain_taper": True},
    ),
    Candidate(
        "branches",
        "the head only, and chains within disjuncts (conditional_branches)",
        {**HEAD_5K, "conditional_branches": True, "chain_taper": False},
    ),
    Candidate(
        "process_candidates",
        "the default with each conditioned search scored in process (candidates_in_process on)",
        {**HEAD_5K, "candidates_in_process": True},
    ),
    Candidate(
        "narrow_head",
        "conditional + pushdown, the head its own top-K",
        {"pushdown": True, "adaptive_k": False, "conditional": True, "chain_head_docs": 0},
    ),
    Candidate("all", "all three passes", {"pushdown": True, "adaptive_k": True, "conditional": True}),
    Candidate(
        "head_uncapped",
        "conditional + pushdown, a head read at 5k documents, at most 16,000",
        {**HEAD_5K, "chain_head_max": 16000},
    ),
    Candidate(
        "head_share_20k",
        "conditional + pushdown, a head read at 20k documents, at most 16,000",
        {**HEAD_5K, "chain_head_docs": 20000, "chain_head_max": 16000},
    ),
    Candidate(
        "conditional_pushdown_conjuncts",
        "conditional (conjuncts only) + pushdown",
        {"pushdown": True, "adaptive_k": False, "conditional": True, "conditional_disjuncts": False},
    ),
    Candidate(
        "all_conjuncts",
        "all three, conditional on conjuncts only",
        {"pushdown": True, "adaptive_k": True, "conditional": True, "conditional_disjuncts": False},
    ),
    Candidate(
        "fixed_store_ties", "fixed K=20, ties cut by the store", {"mode": "fixed-k", "exact_ties": False}
    ),
    Candidate(
        "all_store_ties",
        "all three, ties cut by the store",
        {"pushdown": True, "adaptive_k": True, "conditional": True, "exact_ties": False},
    ),
)
"""Side by side in one run. An option the engine does not have yet counts as off: a candidate that
needs one on is left out (and said so) until ``serving.planning`` has it."""


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma list of counts such as ``5k,50k,1M`` or ``3000``; increasing, no repeats."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d[\d_]*)\s*([kKmM]?)\s*", part)
        if not m:
            raise SystemExit(f"error usage: --sizes expects counts like 5k,50k,1M, got {part!r}")
        n = int(m.group(1).replace("_", "")) * {"": 1, "k": 1000, "m": 1_000_000}[m.group(2).lower()]
        if n < 100:
            raise SystemExit(f"error usage: --sizes: each size must be at least 100 documents, got {part!r}")
        out.append(n)
    return tuple(sorted(set(out)))


def planning_options() -> tuple[type[Any] | None, dict[str, Any]]:
    """``(PlanningOptions class, its default values)`` when ``serving.planning`` exists, else ``(None, {})``."""
    from serving.settings import ServingSettings

    fields = {f.name: f for f in dataclasses.fields(ServingSettings)}
    if "planning" not in fields:
        return None, {}
    default = ServingSettings().planning  # type: ignore[attr-defined]
    return type(default), dataclasses.asdict(default)


def available_candidates(wanted: Sequence[str]) -> tuple[list[Candidate], dict[str, str]]:
    """The candidates of ``wanted`` this engine can run, and why each other one is left out."""
    _, defaults = planning_options()
    known = {c.name: c for c in CANDIDATES}
    out, missing = [], {}
    for name in wanted:
        if name not in known:
            raise SystemExit(f"error usage: unknown candidate {name!r}; choose from {', '.join(known)}")
        c = known[name]
        absent = [k for k, v in c.planning.items() if v and k not in defaults]
        if absent:
            missing[name] = f"serving.planning has no {', '.join(absent)} yet"
        else:
            out.append(c)
    return out, missing


def candidate_config(cfg: Config, candidate: Candidate) -> Config:
    """``cfg`` with the candidate's ``serving.planning`` options, the others at their defaults (whatever mode the
    config's planning has: it is the benchmark's, not the candidate's)."""
    from serving.settings import ServingSettings

    cls, defaults = planning_options()
    if cls is None:
        return cfg
    settings = cfg.section(ServingSettings)
    planning = cls(**{k: v for k, v in candidate.planning.items() if k in defaults})
    return cfg.with_section(dataclasses.replace(settings, planning=planning))  # type: ignore[call-arg]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)
