"""Benchmark synthesis (DESIGN.md section 4): natural-language requests with gold programs.

Loading a benchmark is light (``load_split``, ``load_manifest``); synthesis (``synthesize``) opens the
engine and is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rl.datasets.errors import BenchError
from rl.datasets.store import DEFAULT_SIZES, SPLITS, Instance, load_manifest, load_split

if TYPE_CHECKING:
    from rl.datasets.synth import SynthConfig, Thresholds, synthesize

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
        from rl.datasets import synth

        return getattr(synth, name)
    raise AttributeError(f"module 'rl.datasets' has no attribute {name!r}")
