"""The query API on a loopback port with a real HTTP client: every endpoint and error path, the fallback
on a dead planner and on hostile programs, limits, auth, logs and metrics."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from indexing.config import Config
from serving.api.service import fallback_program
from serving.engine import Engine
from serving.planner import PlannerSettings
from serving.settings import ApiSettings
from tests.serving.api_support import Api, metric
from tests.serving.planner_support import ScriptedPlanner

GOOD_SQL = "SELECT id FROM products WHERE price < 200 AND id IN <text_1>"
GOOD = {
    "sql": GOOD_SQL,
    "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}],
}
HOSTILE = [
    '{"sql": "SELECT id FROM system.tables", "retrieval_list": []}',
    '{"sql": "SELECT id FROM products; DROP TABLE products", "retrieval_list": []}',
    '{"sql": "SELECT id FROM products WHERE id IN <text_9>", "retrieval_list": []}',
    '{"sql": "SELECT id FROM products WHERE id IN (SELECT id FROM file(\'/etc/passwd\'))", "retrieval_list": []}',
    '{"sql": "SELECT id FROM products WHERE '
    + " AND ".join(["price > 1"] * 400)
    + '", "retrieval_list": []}',
]


@pytest.fixture(scope="module")
def scripted_api(engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner) -> Iterator[Api]:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, breaker_reset_s=0.01)
    api = Api(engines, planner, ApiSettings(max_nl_chars=200, max_body_bytes=20_000))
    yield api
    api.close()


@pytest.fixture(scope="module")
def guided_api(engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner) -> Iterator[Api]:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, breaker_reset_s=0.01,
                              guided_samples=4, timeout_s=120.0)  # fmt: skip
    # Deadlines far past any the tests set, the planner call's own included: four samples on Milvus Lite can pass
    # the default 10 s on a loaded machine, and a sample pass that times out is answered by the fallback (CI,
    # load 12: `test_an_empty_program_gets_the_guided_pass_first` answered by the fallback).
    api = Api(engines, planner, ApiSettings(warmup=False, plan_deadline_s=120.0, execute_deadline_s=120.0))
    yield api
    api.close()


@pytest.fixture(scope="module")
def dead_api(engines: dict[str, Engine]) -> Iterator[Api]:
    from indexing.stores.server import free_port

    planner = PlannerSettings(url=f"http://127.0.0.1:{free_port()}/v1", model="m", retries=1, backoff_s=0.01)
    api = Api(engines, planner, ApiSettings(warmup=False))
    yield api
    api.close()


@pytest.fixture(scope="module")
def token_api(engines: dict[str, Engine]) -> Iterator[Api]:
    api = Api(engines, None, ApiSettings(token="t0ps3cret", warmup=False, max_concurrent=1))
    yield api
    api.close()


def _search(api: Api, query: str = "wireless headphones under 200", **kw: Any) -> httpx.Response:
    return api.client.post("/v1/search", json={"query": query, **kw})


# -- search ---------------------------------------------------------------------------------------


def test_search_with_a_good_program_answers_from_the_planner(
    scripted_api: Api, scripted_planner: ScriptedPlanner
) -> None:
    scripted_planner.completion = json.dumps(GOOD)
    r = _search(scripted_api, k=5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "planner" and body["fallback"] is None
    assert body["program"]["sql"] == GOOD["sql"]
    assert 0 < len(body["results"]) <= 5
    assert [x["rank"] for x in body["results"]] == list(range(1, len(body["results"]) + 1))
    assert set(body["results"][0]["fields"]) >= {"title", "price"}
    assert all(x["fields"]["price"] < 200 for x in body["results"])
    (ph,) = body["placeholders"]
    assert ph["name"] == "text_1" and ph["field"] == "review" and ph["candidates"]
    assert {x["id"] for x in body["results"]} <= set(ph["candidates"])
    assert {"plan_ms", "engine_ms", "fetch_ms"} <= set(body["timings"])
    assert r.headers["x-request-id"] == body["request_id"]


def test_repeated_results_come_with_the_same_fields(scripted_api: Api) -> None:
    first = scripted_api.client.post("/v1/execute", json={"program": GOOD, "k": 5}).json()["results"]
    again = scripted_api.client.post(
        "/v1/execute", json={"program": GOOD, "k": 5, "fields": ["title", "price"]}
    ).json()["results"]
    cached = scripted_api.client.post("/v1/execute", json={"program": GOOD, "k": 5}).json()["results"]
    assert cached == first
    assert [x["fields"] for x in again] == [
        {"title": x["fields"]["title"], "price": x["fields"]["price"]} for x in first
    ]


def test_a_failed_program_is_answered_by_the_samples_most_agree_on(
    guided_api: Api, scripted_planner: ScriptedPlanner
) -> None:
    """Execution-guided decoding: the first program fails validation; of 4 samples, one is not a program,
    one fails, and the two that rank something agree, so they answer (never the fallback)."""
    other = {**GOOD, "sql": GOOD_SQL.replace("price < 200", "price < 50")}
    scripted_planner.completion = json.dumps({**GOOD, "sql": GOOD_SQL.replace("<text_1>", "<text_2>")})
    scripted_planner.samples = ["not a program", json.dumps(GOOD), json.dumps(other), json.dumps(GOOD)]
    answered = metric(guided_api, "proretrieval_api_guided_total", outcome="answered")
    r = _search(guided_api, k=5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "planner" and body["fallback"] is None
    assert body["program"]["sql"] == GOOD["sql"], "the two samples agreeing on one ranking win"
    assert body["planner_program"]["sql"].endswith("<text_2>") and "execution_guided" in body["repairs"]
    guided = body["guided"]
    assert guided["reason"] == "program_placeholder_out_of_range" and guided["samples"] == 4
    assert guided["agreeing"] == 2 and 2 <= guided["ran"] <= 3  # the price < 50 sample may rank nothing
    assert all(x["fields"]["price"] < 200 for x in body["results"]) and body["results"]
    first, second = scripted_planner.bodies
    assert "n" not in first and (second["n"], second["temperature"]) == (4, 0.7) and "seed" not in second
    assert "guided_ms" in body["timings"]
    assert metric(guided_api, "proretrieval_api_guided_total", outcome="answered") == answered + 1


def test_when_no_sample_runs_the_fallback_answers(guided_api: Api, scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = "no program here"
    scripted_planner.samples = ["still none", json.dumps({**GOOD, "sql": "SELECT id FROM products WHERE"})]
    failed = metric(guided_api, "proretrieval_api_guided_total", outcome="failed")
    body = _search(guided_api, k=5).json()
    assert body["source"] == "fallback" and body["guided"] is None
    assert body["fallback"]["reason"].startswith("planner_output_") and scripted_planner.calls == 2
    assert metric(guided_api, "proretrieval_api_guided_total", outcome="failed") == failed + 1


def test_an_unreachable_planner_gets_no_second_pass(
    guided_api: Api, scripted_planner: ScriptedPlanner
) -> None:
    scripted_planner.status = 503
    body = _search(guided_api, k=5).json()
    assert body["source"] == "fallback" and body["fallback"]["reason"] == "planner_unavailable"
    assert scripted_planner.calls == 1, "sampling does not mend an endpoint that is down"


EMPTY = {**GOOD, "sql": "SELECT id FROM products WHERE price < 0 AND id IN <text_1>"}
"""A program that runs and matches no document (no product costs less than nothing)."""


def test_a_program_that_matches_nothing_is_answered_by_the_fallback(
    scripted_api: Api, engines: dict[str, Engine], scripted_planner: ScriptedPlanner
) -> None:
    from serving.dsl.parse import parse_program

    assert not engines["ecommerce"].execute(parse_program(json.dumps(EMPTY)), 5).ids
    scripted_planner.completion = json.dumps(EMPTY)
    before = metric(scripted_api, "proretrieval_api_fallbacks_total", reason="program_empty")
    body = _search(scripted_api, k=5).json()
    assert body["source"] == "fallback" and body["fallback"]["reason"] == "program_empty"
    assert body["planner_program"]["sql"] == EMPTY["sql"] and body["results"]
    assert metric(scripted_api, "proretrieval_api_fallbacks_total", reason="program_empty") == before + 1


def test_an_empty_program_gets_the_guided_pass_first(
    guided_api: Api, scripted_planner: ScriptedPlanner
) -> None:
    scripted_planner.completion = json.dumps(EMPTY)
    scripted_planner.samples = [json.dumps(EMPTY), json.dumps(GOOD), json.dumps(GOOD)]
    body = _search(guided_api, k=5).json()
    assert body["source"] == "planner" and body["guided"]["reason"] == "program_empty", body.get("fallback")
    assert body["program"]["sql"] == GOOD["sql"] and body["results"]


def test_with_fallback_on_empty_off_the_empty_answer_is_the_planners(
    engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner, scripted_planner: ScriptedPlanner
) -> None:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0)
    api = Api(engines, planner, ApiSettings(warmup=False, fallback_on_empty=False))
    try:
        scripted_planner.completion = json.dumps(EMPTY)
        body = _search(api, k=5).json()
        assert body["source"] == "planner" and body["fallback"] is None and body["results"] == []
    finally:
        api.close()


def test_search_fields_and_email(scripted_api: Api, scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = json.dumps(
        {
            "sql": "SELECT id FROM emails WHERE id IN <text_1>",
            "retrieval_list": [{"type": "text", "field": "body", "query": "budget"}],
        }
    )
    r = _search(scripted_api, "about the budget", domain="email", fields=["subject", "date"], k=3)
    assert r.status_code == 200, r.text
    assert set(r.json()["results"][0]["fields"]) == {"subject", "date"}


@pytest.mark.parametrize("completion", [*HOSTILE, "not a program", '{"sql": 1}'])
def test_hostile_or_broken_program_falls_back_with_the_reason(
    scripted_api: Api, scripted_planner: ScriptedPlanner, completion: str
) -> None:
    scripted_planner.completion = completion
    r = _search(scripted_api)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "fallback"
    assert body["fallback"]["reason"].startswith(("program_", "planner_output_"))
    assert body["fallback"]["detail"]
    assert body["program"] == json.loads(
        fallback_program("ecommerce", "wireless headphones under 200").to_json()
    )
    assert body["results"]
    assert {p["mode"] for p in body["placeholders"]} == {"sparse", "dense"}


@pytest.mark.parametrize("query", ["\x1b", "lamp\u200b with\x00 a shade", "\ud7ff\ufeff"])
def test_control_characters_in_the_request_still_get_the_fallback(
    scripted_api: Api, scripted_planner: ScriptedPlanner, query: str
) -> None:
    scripted_planner.completion = "not a program"
    r = _search(scripted_api, query)
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        assert r.json()["source"] == "fallback"
    else:
        assert r.json()["error"] == "empty_query"


def test_fallback_on_a_dead_planner_and_the_metric_counts_it(dead_api: Api) -> None:
    reasons = []
    for _ in range(3):
        r = _search(dead_api, "a red lamp")
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "fallback"
        reasons.append(r.json()["fallback"]["reason"])
    # the first request costs the failed call; the breaker answers the rest at once
    assert reasons == ["planner_unavailable", "planner_circuit_open", "planner_circuit_open"]
    text = dead_api.client.get("/metrics").text
    assert 'proretrieval_api_fallbacks_total{reason="planner_circuit_open"} 2.0' in text
    assert 'proretrieval_api_fallbacks_total{reason="planner_unavailable"} 1.0' in text


def test_planner_5xx_and_timeout_fall_back(scripted_api: Api, scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.status = 500
    assert _search(scripted_api).json()["fallback"]["reason"] == "planner_unavailable"
    scripted_planner.status, scripted_planner.completion, scripted_planner.delay_s = (
        200,
        json.dumps(GOOD),
        0.0,
    )
    import time

    time.sleep(0.05)  # the breaker's reset
    assert _search(scripted_api).json()["source"] == "planner"


def test_no_planner_configured_falls_back(token_api: Api) -> None:
    r = token_api.client.post(
        "/v1/search", json={"query": "a lamp"}, headers={"Authorization": "Bearer t0ps3cret"}
    )
    assert r.status_code == 200
    assert r.json()["fallback"]["reason"] == "planner_not_configured"


# -- plan and execute ------------------------------------------------------------------------------


def test_plan_returns_the_program_only(scripted_api: Api, scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = "```json\n" + json.dumps(GOOD) + "\n```"
    r = scripted_api.client.post("/v1/plan", json={"query": "headphones"})
    assert r.status_code == 200
    assert r.json()["program"]["sql"] == GOOD["sql"]
    assert "results" not in r.json()
    scripted_planner.completion = "nope"
    r = scripted_api.client.post("/v1/plan", json={"query": "headphones"})
    assert r.status_code == 422 and r.json()["error"] == "planner_output_not_json"


def test_plan_with_a_dead_planner_is_503_with_retry_after(dead_api: Api) -> None:
    r = dead_api.client.post("/v1/plan", json={"query": "headphones"})
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"


def test_execute_runs_a_given_program(scripted_api: Api) -> None:
    for program in (GOOD, json.dumps(GOOD)):
        r = scripted_api.client.post("/v1/execute", json={"program": program, "k": 3})
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "program"
        assert len(r.json()["results"]) <= 3


@pytest.mark.parametrize("program", [*HOSTILE, "{", '{"sql": "SELECT id FROM products"}'])
def test_execute_never_500s_on_a_bad_program(scripted_api: Api, program: str) -> None:
    r = scripted_api.client.post("/v1/execute", json={"program": program})
    assert r.status_code == 422, r.text
    assert set(r.json()) == {"error", "detail"}
    assert "\n" not in r.json()["detail"]


# -- request errors and limits -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/search", {"query": "x" * 201}, 422, "nl_too_long"),
        ("/v1/search", {"query": "   "}, 422, "empty_query"),
        ("/v1/search", {"query": "x", "k": 1000}, 422, "bad_k"),
        ("/v1/search", {"query": "x", "domain": "nope"}, 422, "bad_request"),
        ("/v1/search", {"query": "x", "fields": ["colour"]}, 422, "unknown_field"),
        ("/v1/search", {"query": "x", "extra": 1}, 422, "bad_request"),
        ("/v1/search", {}, 422, "bad_request"),
        ("/v1/plan", {"query": "x" * 201}, 422, "nl_too_long"),
        ("/v1/execute", {"program": 3}, 422, "bad_request"),
    ],
)
def test_bad_requests_get_one_line_errors(
    scripted_api: Api, path: str, body: Any, status: int, code: str
) -> None:
    r = scripted_api.client.post(path, json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code


def test_body_too_large_is_413(scripted_api: Api) -> None:
    r = scripted_api.client.post("/v1/search", content=b'{"query": "' + b"x" * 30_000 + b'"}',
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 413
    assert r.json()["error"] == "too_large"


def test_not_json_is_422(scripted_api: Api) -> None:
    r = scripted_api.client.post("/v1/search", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 422


def test_bearer_token(token_api: Api) -> None:
    r = token_api.client.post("/v1/search", json={"query": "a lamp"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = token_api.client.post(
        "/v1/search", json={"query": "a lamp"}, headers={"Authorization": "Bearer wrong"}
    )
    assert r.status_code == 401
    assert token_api.client.get("/healthz").status_code == 200  # probes need no token


def test_concurrency_past_the_bound_is_429_with_retry_after(
    engines: dict[str, Engine], scripted_planner: ScriptedPlanner
) -> None:
    scripted_planner.completion, scripted_planner.delay_s = json.dumps(GOOD), 1.0
    planner = PlannerSettings(url=scripted_planner.url, model="m", retries=0)
    api = Api(engines, planner, ApiSettings(max_concurrent=1, warmup=False))
    try:
        results: list[int] = []
        slow = threading.Thread(target=lambda: results.append(_search(api).status_code))
        slow.start()
        import time

        deadline = time.monotonic() + 10
        while scripted_planner.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        r = _search(api)
        slow.join()
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert results == [200]
    finally:
        api.close()


# -- probes, metrics, logs, openapi, page -------------------------------------------------------------


def test_healthz_and_readyz(scripted_api: Api, dead_api: Api, token_api: Api) -> None:
    assert scripted_api.client.get("/healthz").json() == {"status": "ok"}
    ready = scripted_api.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"index:ecommerce": "ok", "index:email": "ok", "planner": "ok"}
    dead = dead_api.client.get("/readyz")
    assert dead.status_code == 503 and dead.json()["checks"]["planner"] == "unreachable"
    assert token_api.client.get("/readyz").json()["checks"]["planner"] == "not configured"


def test_metrics_are_prometheus_text(scripted_api: Api) -> None:
    scripted_api.client.get("/healthz")
    r = scripted_api.client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    assert 'proretrieval_api_requests_total{route="/healthz",status="200"}' in r.text
    assert "proretrieval_api_stage_seconds_bucket" in r.text


def test_one_json_log_line_per_request_with_the_request_id_and_no_token(
    token_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="serving.api"):
        r = token_api.client.post("/v1/search", json={"query": "a lamp"},
                                  headers={"Authorization": "Bearer t0ps3cret", "X-Request-ID": "req-42"})  # fmt: skip
    assert r.headers["x-request-id"] == "req-42"
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "serving.api"]
    mine = [x for x in lines if x["request_id"] == "req-42"]
    assert len(mine) == 1
    assert mine[0]["status"] == 200 and mine[0]["path"] == "/v1/search" and mine[0]["source"] == "fallback"
    assert "t0ps3cret" not in caplog.text


def test_openapi_document_lists_the_endpoints(scripted_api: Api) -> None:
    doc = scripted_api.client.get("/openapi.json").json()
    assert {"/v1/search", "/v1/plan", "/v1/execute", "/healthz", "/readyz", "/metrics"} <= set(doc["paths"])


def test_page_is_served_without_a_cdn(scripted_api: Api) -> None:
    r = scripted_api.client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "<script src=" not in r.text and "http" not in r.text.replace("http-equiv", "")
    assert scripted_api.client.get("/v1/examples").json()["email"]


# -- prore serve -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--domains", "nope"], "unknown_domain"),
        (["--token-env", "PRORE_TEST_UNSET_TOKEN"], "missing_env"),
        (["--max-concurrent", "0"], "bad_limit"),
    ],
)
def test_prore_serve_refuses_bad_options_in_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], args: list[str], code: str
) -> None:
    from prore.cli import main

    assert main(["--workspace", str(tmp_path), "serve", *args]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and f"error {code}:" in err[0]


def test_prore_serve_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    from prore.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--planner-url" in out and "--token-env" in out


def _serve_args(*argv: str) -> Any:
    from prore.cli import build_parser

    return build_parser().parse_args(["serve", *argv])


def test_prore_serve_prompts_with_the_planner_cards_profile(tmp_path: Any) -> None:
    """``--planner-card`` (the model directory or its planner.json) gives the prompt the planner was trained
    on; a directory without a card, or no flag at all, means ``full``, as for a pretrained checkpoint."""
    from serving.commands import planner_from_args

    model = tmp_path / "final"
    model.mkdir()
    url = ["--planner-url", "http://127.0.0.1:9/v1"]
    cfg = Config()
    assert planner_from_args(_serve_args(*url), cfg).profile == "full"  # type: ignore[union-attr]
    assert planner_from_args(_serve_args(*url, "--planner-card", str(model)), cfg).profile == "full"  # type: ignore[union-attr]
    (model / "planner.json").write_text(
        '{"profile": "compact", "domains": ["ecommerce"], "algorithm": "sft"}'
    )
    for card in (model, model / "planner.json"):
        assert planner_from_args(_serve_args(*url, "--planner-card", str(card)), cfg).profile == "compact"  # type: ignore[union-attr]
    assert planner_from_args(_serve_args(*url, "--planner-profile", "short"), cfg).profile == "short"  # type: ignore[union-attr]
    assert planner_from_args(_serve_args("--planner-card", str(model)), cfg) is None  # no planner, no client
    # an encoder-decoder planner reads the request profile's chat, whatever profile its card names
    (model / "planner.json").write_text('{"profile": "compact", "arch": "minilm-seq2seq"}')
    assert planner_from_args(_serve_args(*url, "--planner-card", str(model)), cfg).profile == "request"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "card",
    ['{"profile": "tiny"}', "[1, 2]", "not json", None],
    ids=["unknown-profile", "not-object", "not-json", "missing"],
)
def test_prore_serve_refuses_a_bad_planner_card_in_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], card: str | None
) -> None:
    from prore.cli import main

    path = tmp_path / "planner.json"
    if card is not None:
        path.write_text(card)
    argv = [
        "--workspace",
        str(tmp_path),
        "serve",
        "--planner-url",
        "http://127.0.0.1:9/v1",
        "--planner-card",
        str(path),
    ]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and "error planner_card:" in err[0]


def test_prore_serve_takes_a_profile_or_a_card_not_both(tmp_path: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        _serve_args("--planner-card", str(tmp_path), "--planner-profile", "short")
    assert exc.value.code == 2
