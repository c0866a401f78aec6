"""Serving fixtures: a tiny planner checkpoint built from a config, a real vLLM CPU server serving it,
a scripted OpenAI-compatible planner (a real HTTP server that answers with given completions), and
a dead endpoint.

The vLLM server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script fails under the
``vllm-cpu`` distribution) on a free loopback port, started once per test process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request

from indexing.stores.server import free_port
from tests.processes import VLLM_SERVER, served

PLANNER_NAME = "planner"



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


class ScriptedPlanner:
    """A real OpenAI-compatible HTTP server (FastAPI on uvicorn, loopback) that answers every chat
    completion with ``completion``, or with HTTP ``status`` when set, after ``delay_s``.

    A call with ``n`` > 1 (execution-guided decoding's samples) gets ``samples`` instead.

    It stands for a trained planner in tests of what the API does with a given completion; the client,
    the HTTP path and the parsing are the real ones.
    """

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        from serving.api.server import ServerThread

        self.completion = ""
        self.models = [PLANNER_NAME]
        """The model ids ``/v1/models`` lists."""
        self.samples: list[str] = [""]
        """What a call with ``n`` > 1 answers, cycled to ``n`` choices (sent in reverse index order)."""
        self.status = 200
        self.delay_s = 0.0
        self.calls = 0
        self.bodies: list[dict[str, Any]] = []
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": name, "object": "model"} for name in self.models]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            import asyncio

            self.calls += 1
            self.bodies.append(await request.json())
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.status != 200:
                return JSONResponse({"error": "scripted"}, status_code=self.status)
            n = int(self.bodies[-1].get("n") or 1)
            texts = [self.completion] if n == 1 else [self.samples[i % len(self.samples)] for i in range(n)]
            return JSONResponse(
                {"id": "c", "object": "chat.completion", "model": PLANNER_NAME,
                 "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                             for i, t in reversed(list(enumerate(texts)))]}
            )  # fmt: skip

        self.server = ServerThread(app).start()
        self.url = self.server.url + "/v1"

    def stop(self) -> None:
        self.server.stop()


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
