"""Benchmark synthesis (DESIGN.md section 4): natural-language requests with gold programs.

Loading a benchmark is light (``load_split``, ``load_manifest``); synthesis (``synthesize``) opens the
engine and is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rl.bench.errors import BenchError
from rl.bench.store import DEFAULT_SIZES, SPLITS, Instance, load_manifest, load_split

if TYPE_CHECKING:
    from rl.bench.synth import SynthConfig, Thresholds, synthesize

__all__ = [
    "DEFAULT_SIZES",
    "SPLITS",
    "BenchError",
    "Instance",
    "SynthConfig",
    "Thresholds",
    "load_manifest",
    "load_split",
    "synthesize",
]

_LAZY = {"SynthConfig", "Thresholds", "synthesize"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from rl.bench import synth

        return getattr(synth, name)
    raise AttributeError(f"module 'rl.bench' has no attribute {name!r}")
