"""The project's kserve.Model under KServe's own ModelServer (a process of its own), in front of the real
vLLM CPU predictor on loopback: KServe's v1 routes, KServe's OpenAI-style routes on the same model
(:mod:`serving.kserve_openai`, importable beside vLLM 0.32 through :mod:`serving.kserve_compat`), and the
predictor's OpenAI-style route the model calls."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexing.stores.server import free_port
from serving.dsl import parse_program
from serving.planner import read_program
from serving.prompt import EXAMPLE_PROGRAMS
from tests.needs import needs
from tests.processes import served
from tests.serving.planner_support import PLANNER_NAME, ScriptedPlanner

pytestmark = needs("kserve", reason="pip install kserve")

UNAVAILABLE = ("planner_unavailable", "planner_timeout", "planner_circuit_open", "planner_bad_response")
"""The planner codes of an endpoint that gave no completion (the OpenAI route answers 503)."""


def _prore(ws: Path, *args: str) -> None:
    env = {**os.environ, "PRORE_WORKSPACE": str(ws)}
    subprocess.run([sys.executable, "-m", "prore", "--workspace", str(ws), *args], check=True, env=env,
                   capture_output=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def kserve_workspaces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two copies of one built workspace: chDB lets one process at a time open a workspace's store."""
    ws = tmp_path_factory.mktemp("kserve-ws")
    _prore(ws, "corpus", "build", "ecommerce", "--size", "200")
    _prore(ws, "--embedder", "hashing", "index", "build", "ecommerce")
    copy = ws.with_name(ws.name + "-copy")
    shutil.copytree(ws, copy, symlinks=True)  # chDB links its metadata and data relatively
    return ws, copy


@contextlib.contextmanager
def _model_server(ws: Path, planner_url: str, log_name: str) -> Iterator[str]:
    """``python -m serving.kserve`` (KServe's ModelServer) in front of the planner at ``planner_url``."""
    port = free_port()
    host = planner_url.removeprefix("http://").removesuffix("/v1")
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "serving.kserve", "--workspace", str(ws), "--domains", "ecommerce",
        "--predictor_host", host, "--predictor_path", "/v1", "--planner_model", PLANNER_NAME,
        "--http_port", str(port), "--grpc_port", str(free_port()),
    ]  # fmt: skip
    with served(
        command, url + "/v1/models/proretrieval", ws / log_name, what="the model server", timeout_s=240
    ):
        yield url


@pytest.fixture(scope="module")
def transformer(vllm_server: str, kserve_workspaces: tuple[Path, Path]) -> Iterator[str]:
    """The model server in front of the real vLLM CPU predictor."""
    with _model_server(kserve_workspaces[0], vllm_server, "kserve.log") as url:
        yield url


@pytest.fixture(scope="module")
def scripted_transformer(
    scripted_planner_server: ScriptedPlanner, kserve_workspaces: tuple[Path, Path]
) -> Iterator[str]:
    """The model server in front of the scripted planner (a real HTTP server answering a given completion),
    for what the chat route does with a program that parses and with one that does not."""
    with _model_server(kserve_workspaces[1], scripted_planner_server.url, "kserve.log") as url:
        yield url


def _chat(url: str, body: dict[str, Any], timeout: float = 300) -> httpx.Response:
    return httpx.post(url + "/openai/v1/chat/completions", json=body, timeout=timeout)


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
    r = httpx.post(
        transformer + "/v1/models/proretrieval:predict", json={"instances": [{"q": 1}]}, timeout=60
    )
    assert r.status_code == 400 and "instances[0]" in r.text
    r = httpx.post(transformer + "/v1/models/proretrieval:predict",
                   json={"instances": [{"query": "x" * 5000}]}, timeout=60)  # fmt: skip
    assert r.json()["predictions"][0]["error"] == "nl_too_long"


@pytest.mark.slow
@pytest.mark.server
def test_openai_model_listing(transformer: str) -> None:
    r = httpx.get(transformer + "/openai/v1/models", timeout=10)
    assert r.status_code == 200, r.text
    listing = r.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["proretrieval"]
    assert httpx.get(transformer + "/openai/v1/models/proretrieval", timeout=10).status_code == 200


@pytest.mark.slow
@pytest.mark.server
def test_openai_chat_answers_the_planners_program_as_v1_does(transformer: str) -> None:
    query = "wireless headphones"
    r = _chat(transformer, {"model": "proretrieval", "domain": "ecommerce", "messages": [
        {"role": "system", "content": "ignored: the model has its own prompt"},
        {"role": "user", "content": query}]})  # fmt: skip
    if r.status_code == 200:
        chat = r.json()
        assert chat["object"] == "chat.completion" and chat["model"] == "proretrieval"
        (choice,) = chat["choices"]
        assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
        program = parse_program(choice["message"]["content"])  # the validated program, as JSON text
        assert json.loads(program.to_json()) == json.loads(choice["message"]["content"])
        usage = chat["usage"]  # the planner call's tokens, as vLLM counted them
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    else:
        # no program: the reason, as the v1 route's fallback gives it (type = reason, message = detail)
        assert r.status_code in (422, 503), r.text
        error = r.json()["error"]
        assert error["code"] == str(r.status_code) and error["message"]
        assert error["type"].startswith("planner_output_" if r.status_code == 422 else UNAVAILABLE)
    # the v1 route plans the same request with the same planner (temperature 0): the same program, or
    # the same reason; an endpoint that gave no completion either time is all that is not compared
    v1 = httpx.post(transformer + "/v1/models/proretrieval:predict", timeout=300,
                    json={"instances": [{"query": query, "domain": "ecommerce", "k": 1}]}).json()["predictions"][0]  # fmt: skip
    reason = (v1["fallback"] or {}).get("reason", "")
    if reason in UNAVAILABLE or (r.status_code == 503):
        return
    if v1["source"] == "planner" or reason.startswith("program_"):
        assert r.status_code == 200, r.text
        written = v1["program"] if v1["source"] == "planner" else v1["planner_program"]
        assert json.loads(r.json()["choices"][0]["message"]["content"]) == written
    else:
        assert r.status_code == 422 and r.json()["error"]["type"] == reason
        assert r.json()["error"]["message"] == v1["fallback"]["detail"]


@pytest.mark.slow
@pytest.mark.server
def test_openai_chat_streams_the_program_as_server_sent_events(transformer: str) -> None:
    body = {
        "model": "proretrieval",
        "domain": "ecommerce",
        "messages": [{"role": "user", "content": "wireless headphones"}],
    }
    plain = _chat(transformer, body)
    if plain.status_code != 200:
        pytest.skip(f"the planner wrote no program for this request ({plain.status_code}); nothing to stream")
    with httpx.stream("POST", transformer + "/openai/v1/chat/completions", timeout=300,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:  # fmt: skip
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    # temperature 0: the same program as the answer without streaming, and the same token counts
    assert text == plain.json()["choices"][0]["message"]["content"]
    assert [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]][-1] == "stop"
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert {k: chunks[-1]["usage"][k] for k in counts} == {k: plain.json()["usage"][k] for k in counts}


@pytest.mark.slow
@pytest.mark.server
def test_openai_chat_refuses_a_malformed_request(transformer: str) -> None:
    def refused(body: dict[str, Any], status: int) -> dict[str, Any]:
        r = _chat(transformer, body, timeout=60)
        assert r.status_code == status, r.text
        out: dict[str, Any] = r.json()
        return out

    error = refused({"model": "proretrieval", "messages": [{"role": "system", "content": "hi"}]}, 400)[
        "error"
    ]
    assert (
        error["type"] == "bad_chat" and "no user message" in error["message"] and error["param"] == "messages"
    )
    error = refused({"model": "proretrieval", "domain": "recipes", "messages": [{"role": "user", "content": "x"}]},
                    400)["error"]  # fmt: skip
    assert error["type"] == "bad_chat" and error["param"] == "domain" and "ecommerce" in error["message"]
    error = refused({"model": "proretrieval", "n": 2, "messages": [{"role": "user", "content": "x"}]}, 400)[
        "error"
    ]
    assert error["param"] == "n" and error["type"] == "bad_chat"
    # the v1 route's refusals, with the same codes
    error = refused({"model": "proretrieval", "messages": [{"role": "user", "content": "x" * 5000}]}, 422)[
        "error"
    ]
    assert error["type"] == "nl_too_long" and "5000" in error["message"]
    # not a chat-completions request at all: FastAPI's validation, naming the field
    detail = refused({"model": "proretrieval", "messages": "wireless headphones"}, 422)["detail"]
    assert any("messages" in map(str, d["loc"]) for d in detail)


@pytest.mark.slow
@pytest.mark.server
def test_openai_chat_answers_the_repaired_program(
    scripted_transformer: str, scripted_planner: ScriptedPlanner
) -> None:
    query = "wireless headphones under $200 with great noise cancelling"
    scripted_planner.completion = f"Here is the program: {EXAMPLE_PROGRAMS['ecommerce']} Hope it helps."
    scripted_planner.usage = {"prompt_tokens": 321, "completion_tokens": 54, "total_tokens": 375}
    try:
        r = _chat(scripted_transformer, {"model": "proretrieval", "messages": [
            {"role": "user", "content": "an earlier request"}, {"role": "assistant", "content": "{}"},
            {"role": "user", "content": [{"type": "text", "text": query}]}]})  # fmt: skip
    finally:
        scripted_planner.usage = None
    assert r.status_code == 200, r.text
    # the tokens the planner's endpoint counted, passed on
    assert {k: r.json()["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 321,
        "completion_tokens": 54,
        "total_tokens": 375,
    }
    (choice,) = r.json()["choices"]
    program, repairs = read_program(scripted_planner.completion)  # the planner client's own reading
    assert repairs == ("surrounding_text",)
    assert choice["message"]["content"] == program.to_json()
    assert json.loads(choice["message"]["content"]) == json.loads(EXAMPLE_PROGRAMS["ecommerce"])
    # the planner was asked once, with the last user message as the request
    assert scripted_planner.calls == 1
    asked = json.dumps(scripted_planner.bodies[0]["messages"])
    assert query in asked and "an earlier request" not in asked


@pytest.mark.slow
@pytest.mark.server
def test_openai_chat_gives_the_planners_reason_as_v1_does(scripted_transformer: str,
                                                          scripted_planner: ScriptedPlanner) -> None:  # fmt: skip
    scripted_planner.completion = "SELECT id FROM products"  # not a program
    chat = _chat(
        scripted_transformer, {"model": "proretrieval", "messages": [{"role": "user", "content": "a lamp"}]}
    )
    assert chat.status_code == 422, chat.text
    v1 = httpx.post(scripted_transformer + "/v1/models/proretrieval:predict", timeout=120,
                    json={"instances": [{"query": "a lamp", "k": 1}]}).json()["predictions"][0]  # fmt: skip
    assert v1["source"] == "fallback" and v1["fallback"]["reason"].startswith("planner_output_")
    error = chat.json()["error"]
    assert (error["type"], error["message"]) == (v1["fallback"]["reason"], v1["fallback"]["detail"])
    # an endpoint that fails is a 503 with the planner's code (last: it opens the circuit breaker)
    scripted_planner.status = 500
    chat = _chat(
        scripted_transformer, {"model": "proretrieval", "messages": [{"role": "user", "content": "a lamp"}]}
    )
    assert chat.status_code == 503, chat.text
    assert (
        chat.json()["error"]["type"] == "planner_unavailable"
        and "HTTP 500" in chat.json()["error"]["message"]
    )


@pytest.mark.slow
@pytest.mark.server
def test_the_predictors_openai_route_the_transformer_calls(vllm_server: str) -> None:
    r = httpx.post(vllm_server + "/chat/completions", timeout=120, json={
        "model": PLANNER_NAME, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
