"""core.openai_client against a real HTTP server on loopback (``http.server`` in a thread, on a free
port) whose answers each test scripts: retries of 503 and of a refused connection, ``Retry-After`` waited
for, giving up after the last try with a typed one-line error, a 400 failed at once, sync and async; and
the errors the callers turn those into (the embedder's, the rewriter's, the planner's)."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError
from core.openai_client import (
    ChatCompletion,
    OpenAIBadResponse,
    OpenAIClient,
    OpenAIStatusError,
    OpenAITimeout,
    OpenAIUnreachable,
    RetryPolicy,
    Usage,
    retry_after_s,
)
from indexing.stores.server import free_port

FAST = RetryPolicy(max_attempts=3, backoff_s=0.01, max_backoff_s=5.0)
"""Three tries, waits of at most 10 and 20 ms (a ``Retry-After`` up to 5 s is honoured)."""


def _chat_body(text: str = "hello") -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2},
    }


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=_chat_body)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Call:
    method: str
    path: str
    at: float
    headers: dict[str, str]
    body: Any


class Scripted:
    """A real HTTP server: each request gets the next scripted :class:`Answer` (the last one repeats), and
    is recorded with its arrival time."""

    def __init__(self) -> None:
        self.answers: list[Answer] = [Answer()]
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        script = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with script.lock:
                    script.calls.append(
                        Call(
                            self.command,
                            self.path,
                            time.monotonic(),
                            dict(self.headers),
                            json.loads(raw) if raw else None,
                        )
                    )
                    answer = script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                out = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                # the client may have timed out first (the timeout tests): then nothing is left to answer
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(out)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *answers: Answer) -> None:
        with self.lock:
            self.answers, self.calls = list(answers), []

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[Scripted]:
    server = Scripted()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(scripted_server: Scripted) -> Scripted:
    scripted_server.script(Answer())
    return scripted_server


def _chat(client: OpenAIClient, mode: str, **kw: Any) -> ChatCompletion:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if mode == "sync":
        return client.chat(body, **kw)

    async def go() -> ChatCompletion:
        async with client:
            return await client.achat(body, **kw)

    return asyncio.run(go())


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_503_is_retried_then_the_answer_comes_back(server: Scripted, mode: str) -> None:
    server.script(Answer(503, {"error": "busy"}), Answer(503, {"error": "busy"}), Answer())
    got = _chat(OpenAIClient(server.url, retry=FAST), mode)
    assert [c.text for c in got.choices] == ["hello"] and got.attempts == 3
    assert got.usage == Usage(7, 2)
    assert [(c.method, c.path) for c in server.calls] == [("POST", "/v1/chat/completions")] * 3
    assert (
        server.calls[0].body
        == server.calls[2].body
        == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )


@pytest.mark.parametrize("mode", MODES)
def test_retry_after_seconds_is_waited_for(server: Scripted, mode: str) -> None:
    server.script(Answer(429, {"error": "slow down"}, {"Retry-After": "1"}), Answer())
    got = _chat(OpenAIClient(server.url, retry=FAST), mode)
    assert got.attempts == 2
    first, second = server.calls
    assert second.at - first.at >= 0.95, "the client came back before the Retry-After it was given"


def test_retry_after_as_an_http_date_and_its_cap() -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = retry_after_s(later)
    assert wait is not None and 27 <= wait <= 30
    assert RetryPolicy(max_backoff_s=2.0).delay(1, retry_after=wait) == 2.0  # capped at the policy's maximum
    assert retry_after_s("nan") is None and retry_after_s("-3") == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_gives_up_after_the_last_try_with_one_typed_line(server: Scripted, mode: str) -> None:
    server.script(Answer(503, b"overloaded\nby far"))
    with pytest.raises(OpenAIStatusError) as info:
        _chat(OpenAIClient(server.url, retry=FAST), mode)
    err = info.value
    assert len(server.calls) == FAST.max_attempts == err.attempts
    assert err.status == 503 and err.retryable and err.code == "openai_status"
    assert "\n" not in str(err) and "\n" not in err.one_line()
    assert "HTTP 503 (after 3 tries)" in err.message and "overloaded by far" in err.body


@pytest.mark.parametrize("mode", MODES)
def test_a_400_is_not_retried(server: Scripted, mode: str) -> None:
    server.script(Answer(400, {"error": "bad request"}), Answer())
    with pytest.raises(OpenAIStatusError) as info:
        _chat(OpenAIClient(server.url, retry=FAST), mode)
    assert len(server.calls) == 1
    assert info.value.status == 400 and not info.value.retryable and info.value.attempts == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_connection_is_retried_then_unreachable(mode: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(OpenAIUnreachable) as info:
        _chat(OpenAIClient(dead, retry=FAST), mode)
    assert info.value.attempts == 3 and info.value.retryable and info.value.reason == "ConnectError"


@pytest.mark.parametrize("mode", MODES)
def test_timeouts_are_retried_unless_the_policy_says_not(server: Scripted, mode: str) -> None:
    server.script(Answer(delay_s=0.6), Answer())
    got = _chat(OpenAIClient(server.url, timeout_s=0.2, retry=FAST), mode)
    assert got.attempts == 2 and len(server.calls) == 2
    server.script(Answer(delay_s=0.6), Answer())
    once = RetryPolicy(max_attempts=3, backoff_s=0.01, retry_timeouts=False)
    with pytest.raises(OpenAITimeout) as info:
        _chat(OpenAIClient(server.url, timeout_s=0.2, retry=once), mode)
    assert len(server.calls) == 1 and info.value.code == "openai_timeout"


def test_a_body_that_is_not_json_or_not_a_completion_is_a_bad_response(server: Scripted) -> None:
    client = OpenAIClient(server.url, retry=FAST)
    server.script(Answer(200, b"<html>hi</html>"))
    with pytest.raises(OpenAIBadResponse, match="did not answer with JSON"):
        client.chat({"model": "m"})
    server.script(Answer(200, {"object": "list"}))
    with pytest.raises(OpenAIBadResponse, match="without a chat completion"):
        client.chat({"model": "m"})
    assert len(server.calls) == 1, "a 2xx is an answer: never sent again"
    client.close()


def test_choices_come_in_index_order_and_odd_usage_counts_as_zero(server: Scripted) -> None:
    body = {
        "choices": [
            {"index": 1, "message": {"content": "b"}, "finish_reason": "length"},
            {"index": 0, "message": {"content": None}},
        ],
        "usage": {"prompt_tokens": -1},
    }
    server.script(Answer(200, body))
    with OpenAIClient(server.url) as client:
        got = client.chat({"model": "m"})
    assert [(c.index, c.text, c.finish_reason) for c in got.choices] == [(0, None, None), (1, "b", "length")]
    assert got.usage == Usage(0, 0)


@pytest.mark.parametrize("mode", MODES)
def test_embeddings_and_models(server: Scripted, mode: str) -> None:
    vectors = {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]}
    models = {"object": "list", "data": [{"id": "a"}, {"id": "b"}]}
    server.script(Answer(503), Answer(200, vectors), Answer(200, models))
    client = OpenAIClient(server.url, retry=FAST)
    if mode == "sync":
        got, names = client.embeddings("e", ["x", "y"]), client.models()
    else:

        async def go() -> tuple[Any, list[str]]:
            async with client:
                return await client.aembeddings("e", ["x", "y"]), await client.amodels()

        got, names = asyncio.run(go())
    assert got.vectors == [[1.0, 0.0], [0.0, 1.0]] and got.attempts == 2
    assert names == ["a", "b"]
    assert server.calls[1].body == {"model": "e", "input": ["x", "y"], "encoding_format": "float"}
    assert [(c.method, c.path) for c in server.calls] == [("POST", "/v1/embeddings")] * 2 + [
        ("GET", "/v1/models")
    ]


def test_the_key_comes_from_the_argument_or_the_named_environment_variable(
    server: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRORE_TEST_OPENAI_KEY", "from-env")
    monkeypatch.setenv("OPENAI_API_KEY", "never-sent")
    for client, sent in [
        (OpenAIClient(server.url, api_key="given"), "Bearer given"),
        (OpenAIClient(server.url, api_key_env="PRORE_TEST_OPENAI_KEY"), "Bearer from-env"),
        (OpenAIClient(server.url), None),
    ]:
        server.script(Answer(200, {"data": []}))
        assert client.models() == []
        assert server.calls[0].headers.get("Authorization") == sent
        assert client.headers.get("authorization") == sent
        client.close()


def test_a_client_pickles_without_its_connections(server: Scripted) -> None:
    server.script(Answer(200, {"data": [{"id": "a"}]}))
    client = OpenAIClient(server.url, api_key="k", retry=FAST)
    client.models()
    copy = pickle.loads(pickle.dumps(client))
    assert copy.models() == client.models() and copy.retry == FAST and copy.headers == client.headers
    client.close()
    copy.close()


def test_a_policy_is_checked() -> None:
    with pytest.raises(ConfigError) as info:
        RetryPolicy(max_attempts=0)
    assert info.value.code == "retry_policy"


# -- what the callers raise -----------------------------------------------------------------------------


def test_the_embedder_keeps_its_error_types(server: Scripted) -> None:
    from indexing.embedders.base import EmbedderError, EmbedderUnavailable
    from indexing.embedders.openai import OpenAIEmbedder

    emb = OpenAIEmbedder(server.url, "e", timeout_s=5, retry=FAST)
    server.script(Answer(503, {"error": "loading"}))
    with pytest.raises(EmbedderUnavailable) as down:
        emb.embed(["x"])
    assert down.value.code == "embedder_unavailable" and len(server.calls) == 3
    assert "\n" not in down.value.one_line() and "HTTP 503" in down.value.message
    server.script(Answer(404, {"error": "no such model"}))
    with pytest.raises(EmbedderError) as refused:
        emb.embed(["x"])
    assert refused.value.code == "embedder" and len(server.calls) == 1
    server.script(Answer(200, {"data": [{"index": 0, "embedding": [3.0, 4.0]}]}))
    with pytest.raises(EmbedderError, match="returned 1 embeddings for 2 texts"):
        emb.embed(["x", "y"])
    server.script(Answer(503), Answer(200, {"data": [{"index": 0, "embedding": [3.0, 4.0]}]}))
    assert emb.embed(["x"]).tolist() == [[pytest.approx(0.6), pytest.approx(0.8)]]
    emb.close()


def test_the_rewriter_keeps_its_error_type(server: Scripted, tmp_path: Path) -> None:
    from rl.datasets.errors import BenchError
    from rl.datasets.rewriter import Rewriter, RewriterConfig

    rw = Rewriter(RewriterConfig(url=server.url, model="m", retry=FAST), tmp_path)
    server.script(Answer(502, {"error": "gateway"}))
    with pytest.raises(BenchError) as info:
        rw.rewrite("Find red jackets")
    assert (
        info.value.code == "bench_rewriter" and len(server.calls) == 3 and "\n" not in info.value.one_line()
    )
    server.script(Answer(503), Answer(200, _chat_body('<think>hm</think>\n"Red jackets, please"\nextra')))
    assert rw.rewrite("Find red jackets") == "Red jackets, please" and rw.sent == 1
    rw.close()


def test_the_planner_keeps_its_error_codes(server: Scripted) -> None:
    from serving.planner import Planner, PlannerSettings, PlannerUnavailable

    async def plan(settings: PlannerSettings) -> Any:
        async with Planner(settings) as planner:
            return await planner.plan("ecommerce", "x")

    settings = PlannerSettings(url=server.url, model="m", structured=False, retries=2, backoff_s=0.01)
    server.script(Answer(503, {"error": "busy"}, {"Retry-After": "0"}))
    with pytest.raises(PlannerUnavailable) as info:
        asyncio.run(plan(settings))
    assert info.value.code == "planner_unavailable" and len(server.calls) == 3 and "503" in info.value.message
    server.script(Answer(200, {"choices": []}))
    with pytest.raises(PlannerUnavailable) as empty:
        asyncio.run(plan(settings))
    assert empty.value.code == "planner_bad_response"
    server.script(Answer(200, {"nothing": 1}))
    with pytest.raises(PlannerUnavailable) as bad:
        asyncio.run(plan(settings))
    assert bad.value.code == "planner_bad_response" and "not a chat completion" in bad.value.message
