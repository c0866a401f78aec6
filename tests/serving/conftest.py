"""Serving fixtures: a scripted OpenAI-compatible planner (a real HTTP server that answers with given
completions), a dead endpoint, engines on the session's small MiniLM index (``engines``, per module) and small
synthetic product indexes with hashing vectors.

The real vLLM CPU server on a tiny planner checkpoint (``vllm_server``) is tests/conftest.py's: the
evaluation tests of tests/rl use the same one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config, MilvusConfig
from indexing.stores.server import free_port
from serving.engine import Engine
from tests.serving.planner_support import GATE_TRAINING, PLANNER_NAME, ScriptedPlanner


@pytest.fixture(scope="module")
def engines(small_index_cfg: Config) -> Iterator[dict[str, Engine]]:
    """Engines on the session's small MiniLM index of both corpora, opened once per test module."""
    opened = {d: Engine.open(small_index_cfg, d) for d in ("ecommerce", "email")}
    yield opened
    for e in opened.values():
        e.close()


@pytest.fixture
def dead_url() -> str:
    """An OpenAI-style base URL where nothing listens (a port bound and closed just now)."""
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.fixture(scope="session")
def scripted_planner_server() -> Iterator[ScriptedPlanner]:
    server = ScriptedPlanner()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scripted_planner(scripted_planner_server: ScriptedPlanner) -> ScriptedPlanner:
    """The session's scripted planner, reset: answers ``completion`` (set it) at once with 200."""
    s = scripted_planner_server
    s.completion, s.samples, s.status, s.delay_s, s.calls, s.models = "", [""], 200, 0.0, 0, [PLANNER_NAME]
    s.bodies.clear()
    return s


@pytest.fixture(scope="session")
def hashing_index(
    workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> Callable[..., Config]:
    """``hashing_index(name, n, seed=0)``: the config of a new index of ``n`` synthetic products (chDB,
    Milvus Lite with FLAT indexes, so searches are exact, 32-dimensional hashing vectors, BM25)."""

    from indexing.build import build_index

    def build(name: str, n: int, seed: int = 0) -> Config:
        cfg = workspace_config(
            name, milvus=MilvusConfig(index_type="FLAT"), text="hashing", image="hashing", hashing_dim=32
        )
        write_synthetic_corpus(cfg, "ecommerce", n, seed=seed)
        build_index(cfg, "ecommerce", progress=False)
        return cfg

    return build


@pytest.fixture(scope="session")
def readme_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose ``workspace/`` the README's serving tests train their planners in and serve
    (:func:`tests.serving.serve_support.readme_workspace`), built once: the tests that use it run on one
    pytest-xdist worker (``tests.conftest.XDIST_GROUPS``), one module's servers after the other's."""
    from tests.serving.serve_support import readme_workspace

    return readme_workspace(tmp_path_factory.mktemp("readme-serving"))


@pytest.fixture(scope="session")
def gated_card(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A planner model directory whose card names a familiarity gate calibrated on
    ``planner_support.GATE_TRAINING`` (ecommerce only), for ``serving.api.fuse_gate: familiar``."""
    import json

    from serving.familiarity import Familiarity
    from serving.prompt import CARD

    model = tmp_path_factory.mktemp("gated-planner")
    card = {"profile": "compact", "domains": ["ecommerce"], "algorithm": "sft",
            "familiarity": Familiarity.calibrate({"ecommerce": GATE_TRAINING}).save(model)}  # fmt: skip
    (model / CARD).write_text(json.dumps(card))
    return model
