"""Shared pieces of the verl tests: a small synthesized benchmark, its export, and the skip for verl itself.

verl 0.9.1 lives in its own environment (``.venv-verl``, made by ``scripts/verl-env.sh``); tests that import
verl call :func:`require_verl`, which skips them elsewhere with a reason saying how to run them.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from rl.bench import SynthConfig, synthesize
from rl.bench.context import BenchContext
from serving.engine import Engine

SIZES = {"train": 24, "test": 4, "ood": 4}
ROOT = Path(__file__).resolve().parents[2]
VERL_VENV = ROOT / ".venv-verl"


def require_verl() -> ModuleType:
    """``verl`` itself, or a skip naming the environment that has it."""
    if VERL_VENV.is_dir():
        reason = "verl 0.9.1 is installed in .venv-verl, not here: run `make test-verl`"
    else:
        reason = "verl 0.9.1 needs its own environment: `bash scripts/verl-env.sh` makes .venv-verl, then `make test-verl`"
    verl = pytest.importorskip("verl", reason=reason)
    assert verl.__version__ == "0.9.1", f"the verl tests pin verl 0.9.1, found {verl.__version__}"
    return verl


def synth_bench(cfg: Config, domain: str, engine: Engine, out: Path, sizes: dict[str, int] | None = None) -> Workspace:
    """A small benchmark of ``domain`` synthesized on ``engine`` into the workspace ``out``."""

    def opener(c: Config, d: str, s: SynthConfig) -> Any:
        return BenchContext(c, d, engine, seed=s.seed, sizes=s.sizes, progress=s.progress)

    ws = Workspace(out)
    synthesize(cfg, domain, SynthConfig(sizes=sizes or SIZES, seed=11, progress=False), out=ws, opener=opener)
    return ws
