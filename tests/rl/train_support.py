"""Shared pieces of the local-training tests: a small benchmark of both domains on the session's index,
and a tiny SFT checkpoint trained once per session (what the planner and resume tests start from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from serving.engine import Engine
from tests.rl.verl_support import synth_bench

DOMAINS = ("ecommerce", "email")
SIZES = {"train": 80, "test": 6, "ood": 4}
"""Enough train instances that the 5% validation hold-out is never empty."""
TINY = ["--size", "xs", "--batch-size", "8", "--eval-steps", "3", "--logging-steps", "1"]
"""SFT flags of the tests: the 0.3M-parameter model, three steps between validations."""


def make_bench(cfg: Config, root: Path) -> Workspace:
    for d in DOMAINS:
        engine = Engine.open(cfg, d)
        try:
            synth_bench(cfg, d, engine, root, SIZES)
        finally:
            engine.close()
    return Workspace(root)


@pytest.fixture(scope="session")
def train_bench(small_index_cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A workspace holding a benchmark of both domains synthesized on the session's index."""
    return make_bench(small_index_cfg, tmp_path_factory.mktemp("train-bench"))
