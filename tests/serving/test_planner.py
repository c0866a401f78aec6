"""The planner client against a real vLLM CPU server on loopback, a scripted endpoint and a dead one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from core.errors import ProReError
from serving.dsl import DslLimits, Program
from serving.planner import (
    CircuitBreaker,
    Plan,
    Planner,
    PlannerOutputError,
    PlannerSettings,
    PlannerUnavailable,
    read_program,
    repair_completion,
)
from tests.serving.planner_support import PLANNER_NAME, ScriptedPlanner

GOOD = '{"sql": "SELECT id FROM products WHERE id IN <text_1>", "retrieval_list": [{"type": "text", "field": "review", "query": "great sound"}]}'

# A schema a random model cannot wander in for long: short SQL, short queries, at most two entries.
TIGHT = DslLimits(max_sql_chars=120, max_query_chars=24, max_entries=2)

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _plan(settings: PlannerSettings, domain: str, nl: str, *, timeout_s: float | None = None) -> Plan:
    async with Planner(settings) as planner:
        return await planner.plan(domain, nl, timeout_s=timeout_s)


# -- against vLLM ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_vllm_structured_output_parses_as_a_program(vllm_server: str, domain: str) -> None:
    settings = PlannerSettings(
        url=vllm_server, model=PLANNER_NAME, schema_limits=TIGHT, max_tokens=600, timeout_s=120
    )
    plan = _run(_plan(settings, domain, "wireless headphones under $200"))
    assert isinstance(plan.program, Program)
    assert len(plan.program.sql) <= TIGHT.max_sql_chars
    assert len(plan.program.retrieval_list) <= TIGHT.max_entries
    assert plan.attempts == 1


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_vllm_grammar_output_is_a_valid_program(vllm_server: str, domain: str) -> None:
    # Even this untrained model writes a program that validates: the grammar carries the SQL's rules.
    from indexing.schema import schema_for
    from serving.dsl import validate

    limits = DslLimits(max_query_chars=24, max_entries=2, max_literal_chars=8, max_in_list=2)
    settings = PlannerSettings(url=vllm_server, model=PLANNER_NAME, output="grammar", schema_limits=limits,
                               max_tokens=1500, timeout_s=300)  # fmt: skip
    plan = _run(_plan(settings, domain, "wireless headphones under $200"))
    validate(plan.program, schema_for(domain), limits)
    assert plan.program.sql.startswith(f"SELECT DISTINCT id FROM {schema_for(domain).table} WHERE ")
    assert plan.repairs == () and plan.attempts == 1


@pytest.mark.slow
@pytest.mark.server
def test_vllm_without_structured_output_is_a_typed_output_error_or_a_program(vllm_server: str) -> None:
    # An untrained model writes noise; the client must say so with the parser's code, never crash.
    settings = PlannerSettings(
        url=vllm_server, model=PLANNER_NAME, structured=False, max_tokens=32, timeout_s=120
    )
    try:
        plan = _run(_plan(settings, "ecommerce", "a red lamp"))
    except PlannerOutputError as exc:
        assert exc.code.startswith("planner_output_")
        assert isinstance(exc.completion, str)
    else:
        assert isinstance(plan.program, Program)


@pytest.mark.slow
@pytest.mark.server
def test_vllm_ready_and_unknown_model_is_unavailable_without_retry(vllm_server: str) -> None:
    async def go() -> tuple[bool, PlannerUnavailable]:
        async with Planner(PlannerSettings(url=vllm_server, model="no-such-model", retries=3)) as planner:
            ready = await planner.ready()
            with pytest.raises(PlannerUnavailable) as info:
                await planner.plan("ecommerce", "x")
            return ready, info.value

    ready, err = _run(go())
    assert ready
    assert err.code == "planner_unavailable"
    assert "404" in err.message


# -- the prompt and the request body ----------------------------------------------------------------


def test_request_carries_the_one_prompt_and_evaluations_json_grammar(
    scripted_planner: ScriptedPlanner,
) -> None:
    from indexing.schema import PRODUCTS
    from rl.eval.planner_methods import program_grammar
    from serving.dsl.structured import STRUCTURED_LIMITS
    from serving.prompt import messages

    scripted_planner.completion = GOOD
    plan = _run(
        _plan(PlannerSettings(url=scripted_planner.url, model="m", profile="short"), "ecommerce", "cheap")
    )
    assert plan.program.retrieval_list[0].query == "great sound"
    body = scripted_planner.bodies[0]
    assert body["messages"] == messages("ecommerce", "cheap", profile="short")
    # json is planner-json:'s constraint: the JSON schema with the programs' separators, under its limits
    assert body["structured_outputs"] == {"grammar": program_grammar(PRODUCTS, STRUCTURED_LIMITS)}
    assert '"{" "\\"sql\\"" ": "' in body["structured_outputs"]["grammar"]
    assert "response_format" not in body


def test_grammar_output_sends_the_program_grammar_instead_of_the_schema(
    scripted_planner: ScriptedPlanner,
) -> None:
    from indexing.schema import EMAILS
    from serving.dsl.grammar import program_grammar_ebnf

    scripted_planner.completion = GOOD
    _run(
        _plan(
            PlannerSettings(url=scripted_planner.url, model="m", output="grammar", schema_limits=TIGHT),
            "email",
            "x",
        )
    )
    body = scripted_planner.bodies[0]
    assert body["structured_outputs"] == {"grammar": program_grammar_ebnf(EMAILS, TIGHT)}
    assert "response_format" not in body
    _run(_plan(PlannerSettings(url=scripted_planner.url, model="m", output="free"), "email", "x"))
    assert (
        "response_format" not in scripted_planner.bodies[1]
        and "structured_outputs" not in scripted_planner.bodies[1]
    )
    with pytest.raises(ProReError) as info:
        PlannerSettings(url=scripted_planner.url, model="m", output="yaml")
    assert info.value.code == "planner_output" and "json, grammar, grounded, free" in str(info.value)


def test_grounded_output_sends_the_grammar_of_this_request_and_the_corpus_values(
    scripted_planner: ScriptedPlanner,
) -> None:
    from indexing.schema import PRODUCTS
    from serving.dsl.grammar import program_grammar_ebnf
    from serving.dsl.grounding import Grounding
    from serving.dsl.structured import constraint_grammar

    scripted_planner.completion = GOOD
    values = {"ecommerce": {"brand": ("Bose", "Sony")}}
    settings = PlannerSettings(url=scripted_planner.url, model="m", output="grounded", schema_limits=TIGHT)

    async def go() -> None:
        async with Planner(settings, values=values) as planner:
            await planner.plan("ecommerce", "sony cans with great sound")

    _run(go())
    grammar = scripted_planner.bodies[0]["structured_outputs"]["grammar"]
    assert grammar == constraint_grammar(PRODUCTS, "grounded", TIGHT, request="sony cans with great sound",
                                         values=values["ecommerce"])  # fmt: skip
    assert grammar.startswith("%llguidance"), (
        "llguidance's own dialect, for a server on vLLM's guidance backend"
    )
    assert "STR_BRAND: \"'Bose'\" | \"'Sony'\"" in grammar and '"great sound"' in grammar
    assert grammar != program_grammar_ebnf(PRODUCTS, TIGHT, Grounding.of("sony cans with great sound"))


def test_api_key_is_sent_as_bearer(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = GOOD
    settings = PlannerSettings(url=scripted_planner.url, model="m", api_key="s3cret", structured=False)
    planner = Planner(settings)
    assert planner._client.headers["authorization"] == "Bearer s3cret"
    assert "response_format" not in planner.payload("ecommerce", "x")
    _run(planner.aclose())


def test_without_a_model_name_the_endpoints_one_model_is_asked_for(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = GOOD

    async def go(settings: PlannerSettings) -> tuple[list[str], str]:
        async with Planner(settings) as planner:
            names = [await planner.model()]
            await planner.plan("ecommerce", "x")
            await planner.plan("ecommerce", "y")
            return names, planner.breaker.state

    names, state = _run(go(PlannerSettings(url=scripted_planner.url, model=None)))
    assert names == [PLANNER_NAME] and state == "closed"
    assert [b["model"] for b in scripted_planner.bodies] == [PLANNER_NAME, PLANNER_NAME]
    scripted_planner.models = ["a", "b"]
    with pytest.raises(PlannerUnavailable) as info:
        _run(_plan(PlannerSettings(url=scripted_planner.url, model=None), "ecommerce", "x"))
    assert info.value.code == "planner_model" and "several models (a, b)" in info.value.message
    assert "\n" not in str(info.value)
    scripted_planner.models = []
    with pytest.raises(PlannerUnavailable, match="serves no model"):
        _run(_plan(PlannerSettings(url=scripted_planner.url, model=None), "ecommerce", "x"))


def test_without_a_model_name_a_dead_endpoint_is_unavailable(dead_url: str) -> None:
    with pytest.raises(PlannerUnavailable) as info:
        _run(_plan(PlannerSettings(url=dead_url, model=None), "ecommerce", "x"))
    assert info.value.code == "planner_unavailable"


def test_prore_serve_asks_for_the_named_model_or_the_endpoints_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from prore.cli import build_parser
    from prore.config import load_config
    from serving.commands import planner_from_args
    from serving.dsl.structured import STRUCTURED_LIMITS

    def settings(
        *argv: str,
    ) -> PlannerSettings:  # the environment is read with the config, as prore's main does
        args = build_parser().parse_args(["serve", "--planner-url", "http://127.0.0.1:9/v1", *argv])
        got = planner_from_args(args, load_config())
        assert got is not None
        return got

    monkeypatch.delenv("PRORE_PLANNER_MODEL", raising=False)
    assert settings().model is None  # the endpoint's one model
    assert settings().output == "grounded" and settings().schema_limits == STRUCTURED_LIMITS  # evaluation's
    assert settings("--planner-model", "planner").model == "planner"
    monkeypatch.setenv("PRORE_PLANNER_MODEL", "proretrieval-planner")  # the chart's
    assert settings().model == "proretrieval-planner"


def test_json_output_without_xgrammar_stops_prore_serve_in_one_line(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prore.cli import main
    from serving.dsl.structured import program_json_grammar
    from serving.planner import prepare

    program_json_grammar.cache_clear()
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # what an environment without vLLM's xgrammar imports
    try:
        argv = [
            "--workspace",
            str(tmp_path),
            "serve",
            "--planner-url",
            "http://127.0.0.1:9/v1",
            "--planner-output",
            "json",
        ]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error missing_extra: xgrammar is not installed"), err
        prepare(
            PlannerSettings(url="http://127.0.0.1:9/v1", model=None, output="grammar"), ["ecommerce", "email"]
        )
    finally:
        program_json_grammar.cache_clear()


def test_grounded_output_without_llguidance_stops_prore_serve_in_one_line(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prore.cli import main
    from serving.dsl.structured import _lark_base

    _lark_base.cache_clear()
    monkeypatch.setitem(
        sys.modules, "llguidance", None
    )  # what an environment without vLLM's llguidance imports
    monkeypatch.setitem(sys.modules, "llguidance.gbnf_to_lark", None)
    try:
        assert main(["--workspace", str(tmp_path), "serve", "--planner-url", "http://127.0.0.1:9/v1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error missing_extra: llguidance is not installed"), err
    finally:
        _lark_base.cache_clear()


# -- repair -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "steps"),
    [
        (GOOD, ()),
        ("```json\n" + GOOD + "\n```", ()),
        ("<think>cheap</think>" + GOOD, ()),
        ("Here it is: " + GOOD, ("surrounding_text",)),
        (GOOD + "\nThis finds the headphones.", ("surrounding_text",)),
        ("```json\n" + GOOD, ("surrounding_text",)),  # an unclosed fence
        (GOOD.replace("great sound", "great\tsound"), ("control_chars",)),
    ],
)
def test_near_misses_are_repaired_once(completion: str, steps: tuple[str, ...]) -> None:
    program, applied = read_program(completion)
    assert applied == steps
    assert program.sql == json.loads(GOOD)["sql"]


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("", "planner_output_not_json"),
        ("no program here", "planner_output_not_json"),
        ('{"sql": "SELECT id FROM products"', "planner_output_not_json"),
        ('{"sql": "SELECT id FROM products", "retrieval_list": [], "x": 1}', "planner_output_unknown_key"),
    ],
)
def test_what_repair_cannot_fix_is_a_typed_output_error(completion: str, code: str) -> None:
    with pytest.raises(PlannerOutputError) as info:
        read_program(completion)
    assert info.value.code == code
    assert info.value.completion == completion


def test_repair_is_bounded_by_size() -> None:
    text, steps = repair_completion("x" * 100_000, max_chars=100)
    assert len(text) == 200
    assert steps == []


def test_scripted_completion_with_trailing_text_is_repaired(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = GOOD + " -- done"
    plan = _run(_plan(PlannerSettings(url=scripted_planner.url, model="m"), "ecommerce", "x"))
    assert plan.repairs == ("surrounding_text",)


# -- retries, timeouts, breaker ---------------------------------------------------------------------


def test_5xx_is_retried_with_backoff_then_unavailable(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.status = 503
    settings = PlannerSettings(url=scripted_planner.url, model="m", retries=2, backoff_s=0.01)
    with pytest.raises(PlannerUnavailable) as info:
        _run(_plan(settings, "ecommerce", "x"))
    assert scripted_planner.calls == 3
    assert "503" in info.value.message
    assert info.value.retryable


def test_4xx_is_not_retried(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.status = 400
    with pytest.raises(PlannerUnavailable):
        _run(
            _plan(
                PlannerSettings(url=scripted_planner.url, model="m", retries=3, backoff_s=0.01), "email", "x"
            )
        )
    assert scripted_planner.calls == 1


def test_timeout_is_not_retried(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = GOOD
    scripted_planner.delay_s = 1.0
    settings = PlannerSettings(url=scripted_planner.url, model="m", timeout_s=0.2, retries=3)
    with pytest.raises(PlannerUnavailable) as info:
        _run(_plan(settings, "ecommerce", "x"))
    assert info.value.code == "planner_timeout"
    assert scripted_planner.calls == 1


def test_stage_deadline_caps_the_whole_call(scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = GOOD
    scripted_planner.delay_s = 1.0
    with pytest.raises(PlannerUnavailable) as info:
        _run(_plan(PlannerSettings(url=scripted_planner.url, model="m"), "ecommerce", "x", timeout_s=0.1))
    assert info.value.code == "planner_timeout"


def test_dead_endpoint_costs_one_call_then_the_breaker_answers(dead_url: str) -> None:
    async def go() -> list[str]:
        settings = PlannerSettings(url=dead_url, model="m", retries=1, backoff_s=0.01, breaker_reset_s=60)
        codes = []
        async with Planner(settings) as planner:
            for _ in range(5):
                try:
                    await planner.plan("ecommerce", "x")
                except PlannerUnavailable as exc:
                    codes.append(exc.code)
            assert planner.breaker.state == "open"
        return codes

    assert _run(go()) == ["planner_unavailable"] + ["planner_circuit_open"] * 4


def test_breaker_half_opens_and_closes_on_success(scripted_planner: ScriptedPlanner) -> None:
    async def go() -> None:
        settings = PlannerSettings(url=scripted_planner.url, model="m", retries=0, breaker_reset_s=0.2)
        async with Planner(settings) as planner:
            scripted_planner.status = 500
            with pytest.raises(PlannerUnavailable):
                await planner.plan("ecommerce", "x")
            with pytest.raises(PlannerUnavailable, match="circuit breaker"):
                await planner.plan("ecommerce", "x")
            scripted_planner.status, scripted_planner.completion = 200, GOOD
            await asyncio.sleep(0.25)
            assert planner.breaker.state == "half_open"
            plan = await planner.plan("ecommerce", "x")
            assert isinstance(plan.program, Program)
            assert planner.breaker.state == "closed"

    _run(go())


def test_breaker_lets_one_trial_through() -> None:
    breaker = CircuitBreaker(threshold=2, reset_s=0.05)
    breaker.failure()
    assert breaker.allow()
    breaker.failure()
    assert not breaker.allow()
    time.sleep(0.06)
    assert breaker.allow()
    assert not breaker.allow()  # a second caller waits for the trial's outcome
    breaker.failure()
    assert breaker.state == "open"


def test_a_trial_without_a_verdict_does_not_keep_the_breaker_open() -> None:
    """A trial whose caller was cancelled gives its turn back; one that never reports is given up after
    ``reset_s``. Either had left every later call refused with the planner up."""
    breaker = CircuitBreaker(threshold=1, reset_s=0.05)
    breaker.failure()
    time.sleep(0.06)
    assert breaker.allow() and not breaker.allow()
    breaker.abandon()  # cancelled
    assert breaker.allow() and not breaker.allow()
    time.sleep(0.06)  # this trial never reported
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed" and breaker.allow()


def test_a_cancelled_call_gives_back_its_trial(scripted_planner: ScriptedPlanner) -> None:
    """A planning call cancelled while it is the breaker's trial (a request's deadline; here the endpoint is slow)
    leaves the breaker able to try again, not refusing for good."""
    scripted_planner.delay_s = 3.0  # past the cancel; the server finishes it before it stops

    async def go() -> None:
        settings = PlannerSettings(url=scripted_planner.url, model="m", retries=0, breaker_reset_s=0.5)
        async with Planner(settings) as planner:
            planner.breaker.failure()
            await asyncio.sleep(0.55)  # half open
            task = asyncio.create_task(planner.plan("ecommerce", "x"))
            deadline = time.monotonic() + 10
            while scripted_planner.calls == 0:  # the trial has reached the endpoint
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert planner.breaker.state == "half_open" and not planner.breaker.allow()  # the trial is out
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert planner.breaker.allow()

    _run(go())


def test_a_served_planner_prompts_with_the_exemplars_its_card_names(tmp_path: Path) -> None:
    """The served prompt carries the card's exemplars, picked as training picked them (serving.exemplars)."""
    import asyncio

    from indexing.config import EmbedderConfig
    from serving.exemplars import ExemplarIndex, close_open_indexes
    from serving.planner import Planner, PlannerSettings

    def program(brand: str, field: str) -> str:
        return json.dumps({"sql": f"SELECT DISTINCT id FROM products WHERE brand = '{brand}' AND id IN <text_1>",
                           "retrieval_list": [{"type": "text", "field": field, "query": "quiet"}]})  # fmt: skip

    pairs = [("ecommerce", "quiet sony headphones", program("Sony", "review")),
             ("ecommerce", "bose speakers that sound warm", program("Bose", "description")),
             ("ecommerce", "cheap blue kettles", json.dumps({"sql": "SELECT DISTINCT id FROM products WHERE price < 30",
                                                              "retrieval_list": []})),
             ("email", "mail from jane about the budget", json.dumps({"sql": "SELECT DISTINCT id FROM emails WHERE id IN <text_1>",
                                                                      "retrieval_list": [{"type": "text", "field": "body", "query": "budget"}]}))]  # fmt: skip
    cfg = EmbedderConfig(text="hashing", hashing_dim=64)
    index = ExemplarIndex.build(pairs, embedder=cfg)
    index.save(tmp_path)
    (tmp_path / "planner.json").write_text(json.dumps({"profile": "compact", "exemplars": index.card(2)}))
    expected = index.select("ecommerce", ["sony headphones, quiet ones"], k=2)[0]
    index.close()
    planner = Planner(PlannerSettings(url="http://127.0.0.1:9/v1", model="m", card=str(tmp_path / "planner.json"),
                                      embedder=cfg, profile="compact"))  # fmt: skip
    try:
        shots = asyncio.run(planner.shots("ecommerce", "sony headphones, quiet ones"))
        assert shots == expected and len(shots) == 2
        assert all(p[0] == "ecommerce" for p in pairs if (p[1], p[2]) in shots), (
            "exemplars of the request's domain only"
        )
        body = planner.payload("ecommerce", "sony headphones, quiet ones", shots)
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
        assert [m["content"] for m in body["messages"][1:5]] == [x for shot in shots for x in shot]
    finally:
        asyncio.run(planner.aclose())
        close_open_indexes()
    no_card = Planner(PlannerSettings(url="http://127.0.0.1:9/v1", model="m"))
    assert asyncio.run(no_card.shots("ecommerce", "anything")) == []
    asyncio.run(no_card.aclose())
