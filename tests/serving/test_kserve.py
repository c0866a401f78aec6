"""The project's kserve.Model under KServe's own ModelServer (a process of its own), in front of the real
vLLM CPU predictor on loopback: KServe's v1 routes, and the predictor's OpenAI-style route it calls."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from indexing.stores.server import free_port
from tests.processes import served
from tests.serving.conftest import PLANNER_NAME

pytest.importorskip("kserve", reason="pip install kserve")


def _prore(ws: Path, *args: str) -> None:
    env = {**os.environ, "PRORE_WORKSPACE": str(ws)}
    subprocess.run([sys.executable, "-m", "prore", "--workspace", str(ws), *args], check=True, env=env,
                   capture_output=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def transformer(vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ws = tmp_path_factory.mktemp("kserve-ws")
    _prore(ws, "corpus", "build", "ecommerce", "--size", "200")
    _prore(ws, "index", "build", "ecommerce")
    port = free_port()
    host = vllm_server.removeprefix("http://").removesuffix("/v1")
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "serving.kserve", "--workspace", str(ws), "--domains", "ecommerce",
        "--predictor_host", host, "--predictor_path", "/v1", "--planner_model", PLANNER_NAME,
        "--http_port", str(port), "--grpc_port", str(free_port()),
    ]  # fmt: skip
    with served(command, url + "/v1/models/proretrieval", ws / "kserve.log", what="the model server", timeout_s=180):
        yield url


@pytest.mark.slow
@pytest.mark.server
def test_v1_model_listing_and_readiness(transformer: str) -> None:
    assert httpx.get(transformer + "/v1/models", timeout=10).json() == {"models": ["proretrieval"]}
    assert httpx.get(transformer + "/v1/models/proretrieval", timeout=10).json()["ready"] is True


@pytest.mark.slow
@pytest.mark.server
def test_v1_predict_answers_every_instance_through_the_predictor(transformer: str) -> None:
    body = {"instances": [{"query": "wireless headphones", "domain": "ecommerce", "k": 3},
                          {"query": "a red lamp", "domain": "ecommerce", "k": 2}]}  # fmt: skip
    r = httpx.post(transformer + "/v1/models/proretrieval:predict", json=body, timeout=300)
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    assert len(predictions) == 2
    for p, k in zip(predictions, (3, 2), strict=True):
        # an untrained planner rarely writes a program that runs; either way the answer has results
        assert p["source"] in ("planner", "fallback")
        assert 0 < len(p["results"]) <= k
        assert "plan_ms" in p["timings"]
        if p["source"] == "fallback":
            assert p["fallback"]["reason"].startswith(("planner_", "program_"))


@pytest.mark.slow
@pytest.mark.server
def test_v1_predict_refuses_a_bad_instance(transformer: str) -> None:
    r = httpx.post(transformer + "/v1/models/proretrieval:predict", json={"instances": [{"q": 1}]}, timeout=60)
    assert r.status_code == 400 and "instances[0]" in r.text
    r = httpx.post(transformer + "/v1/models/proretrieval:predict",
                   json={"instances": [{"query": "x" * 5000}]}, timeout=60)  # fmt: skip
    assert r.json()["predictions"][0]["error"] == "nl_too_long"


@pytest.mark.slow
@pytest.mark.server
def test_the_predictors_openai_route_the_transformer_calls(vllm_server: str) -> None:
    r = httpx.post(vllm_server + "/chat/completions", timeout=120, json={
        "model": PLANNER_NAME, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
