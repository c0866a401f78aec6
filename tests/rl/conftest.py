"""Fixtures of the local-training tests: a small benchmark of both domains on the session's index."""

from __future__ import annotations

import pytest

from indexing.config import Config
from indexing.workspace import Workspace

BENCH_SIZES = {"train": 80, "test": 6, "ood": 4}
"""Enough train instances that the 5% validation hold-out is never empty."""


@pytest.fixture(scope="session")
def train_bench(small_index_cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A workspace holding a benchmark of both domains synthesized on the session's index."""
    from serving.engine import Engine
    from tests.rl.train_support import DOMAINS
    from tests.rl.verl_support import synth_bench

    root = tmp_path_factory.mktemp("train-bench")
    for d in DOMAINS:
        engine = Engine.open(small_index_cfg, d)
        try:
            synth_bench(small_index_cfg, d, engine, root, BENCH_SIZES)
        finally:
            engine.close()
    return Workspace(root)
