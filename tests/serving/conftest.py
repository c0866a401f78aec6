"""Serving fixtures: a tiny planner checkpoint built from a config, a real vLLM CPU server serving it,
a scripted OpenAI-compatible planner (a real HTTP server that answers with given completions), a dead
endpoint, and small synthetic product indexes with hashing vectors.

The vLLM server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script fails under the
``vllm-cpu`` distribution) on a free loopback port, started once per test process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config, MilvusConfig
from indexing.stores.server import free_port
from tests.processes import VLLM_SERVER, served
from tests.serving.planner_support import PLANNER_NAME, ScriptedPlanner


@pytest.fixture(scope="session")
def planner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialized Qwen3 (the ``xs`` size) with a byte-level BPE tokenizer trained on the
    project's prompts and example programs, saved as a Hugging Face checkpoint directory."""
    pytest.importorskip("transformers")
    from rl.train.model import SIZES, build_model
    from rl.train.tokenizer import train_tokenizer
    from serving.prompt import EXAMPLE_PROGRAMS, messages

    out = tmp_path_factory.mktemp("planner-ckpt")
    texts: list[str] = []
    for domain, program in EXAMPLE_PROGRAMS.items():
        for profile in ("short", "full"):
            texts += [m["content"] for m in messages(domain, "wireless headphones under $200", profile=profile)]
        texts += [program] * 8
    tok = train_tokenizer(texts * 4, vocab_size=1024)
    model = build_model(dataclasses.replace(SIZES["xs"], max_positions=4096), tok, seed=0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def vllm_server(planner_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a vLLM CPU server serving the tiny checkpoint as ``planner``."""
    pytest.importorskip("vllm")
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    command = [
        *VLLM_SERVER, "--model", str(planner_checkpoint), "--served-model-name", PLANNER_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", "4096", "--seed", "0",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    with served(command, url + "/models", log_path, what="the vLLM server", timeout_s=300, env=env):
        yield url


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
