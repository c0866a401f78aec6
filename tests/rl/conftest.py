"""Fixtures of the local-training tests: a small benchmark of both domains on the session's index, an
ecommerce index without MiniLM for the trainer and reward-loop tests, and verl's export served by the reward
service on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from indexing.config import Config
from indexing.workspace import Workspace

if TYPE_CHECKING:
    from tests.rl.verl_support import ServedExport

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


@pytest.fixture(scope="session")
def hashing_index_cfg(workspace_config: Callable[..., Config]) -> Config:
    """Config of a workspace holding the ecommerce corpus (600 generated products with their label tables)
    indexed with the hashing embedder: for the tests of verl's trainer, its reward loop and the export, which
    are about programs and rewards, not vectors, so no process of theirs loads MiniLM (the MiniLM index of both
    corpora cost the verl suite's first test about 100 s of setup under CI's load)."""
    from indexing.build import build_index
    from indexing.corpora import generate_labeled
    from indexing.corpora.files import write_corpus
    from indexing.schema import PRODUCTS

    cfg = workspace_config("hashing_index", text="hashing", image="hashing")
    meta = {"generator": PRODUCTS.domain, "size": 600, "seed": 0}
    write_corpus(Workspace(cfg.workspace), PRODUCTS, generate_labeled(PRODUCTS.domain, 600, seed=0), meta)
    build_index(cfg, PRODUCTS.domain, progress=False)
    return cfg


@pytest.fixture(scope="session")
def verl_export(
    hashing_index_cfg: Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedExport]:
    """One ecommerce benchmark on :func:`hashing_index_cfg`, exported for verl (short prompts), and the reward
    service scoring it, shared by verl's config, reward-loop and trainer
    tests: each synthesized, exported and served its own, 13-18 s of the verl suite's setup apiece. The tests
    read the service's counters as differences, so one service serves them all."""
    from tests.rl.verl_support import served_export

    with served_export(hashing_index_cfg, "ecommerce", tmp_path_factory.mktemp("verl-export")) as served:
        yield served
