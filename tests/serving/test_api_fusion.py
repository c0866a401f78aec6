"""The query API fusing the planner's programs with the self-querying retriever (``serving.api.fuse``):
every search runs the planner's program and its samples beside the retriever, and answers with their
weighted reciprocal-rank fusion; a search none of whose programs runs goes to the fallback."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError
from indexing.config import Config
from serving.api.service import START_LOG, QueryService
from serving.dsl import parse_program
from serving.engine import Engine
from serving.engine.results import fuse
from serving.planner import PlannerSettings
from serving.prompt import CARD
from serving.self_query import SelfQuery
from serving.settings import ApiSettings
from tests.serving.api_support import Api, metric
from tests.serving.planner_support import FAMILIAR_REQUEST, GATE_TRAINING, ScriptedPlanner

GOOD_SQL = "SELECT id FROM products WHERE price < 200 AND id IN <text_1>"
GOOD = {
    "sql": GOOD_SQL,
    "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}],
}
CHEAP = {**GOOD, "sql": GOOD_SQL.replace("price < 200", "price < 50")}
QUERY = FAMILIAR_REQUEST


@pytest.fixture(scope="module")
def fused_api(engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner) -> Iterator[Api]:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, breaker_reset_s=0.01,
                              guided_samples=2)  # fmt: skip
    api = Api(engines, planner, ApiSettings(warmup=False, fuse="self-query"))
    yield api
    api.close()


def test_a_search_answers_with_the_programs_and_self_query_fused(
    fused_api: Api, engines: dict[str, Engine], scripted_planner: ScriptedPlanner
) -> None:
    scripted_planner.completion = json.dumps(GOOD)
    scripted_planner.samples = [json.dumps(CHEAP), "not a program"]
    answered = metric(fused_api, "proretrieval_api_fused_total", outcome="answered")
    r = fused_api.client.post("/v1/search", json={"query": QUERY, "k": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "planner" and body["fallback"] is None and "fused" in body["repairs"]
    assert body["program"]["sql"] == GOOD["sql"], "the answer shows the planner's first program that ran"
    fusion = body["fusion"]
    assert (fusion["programs"], fusion["ran"], fusion["weight"], fusion["partner"]) == (
        3,
        2,
        3.0,
        "self-query",
    )
    assert "price < 200" in fusion["filter"] and fusion["partner_ids"]
    # The same fusion computed here from the engine and the retriever directly.
    engine = engines["ecommerce"]
    programs = [engine.execute(parse_program(json.dumps(p)), 10).ids for p in (GOOD, CHEAP)]
    partner = SelfQuery(engine.handle, engine.schema).rankings([QUERY], 10)[0]
    assert isinstance(partner, list) and [doc for doc, _ in partner] == fusion["partner_ids"]
    expected = fuse([*programs, None, fusion["partner_ids"]], [1.0, 1.0, 1.0, 3.0], 10)
    assert [(x["id"], x["score"]) for x in body["results"]] == [(d, pytest.approx(v)) for d, v in expected]
    assert fusion["partner_ids"][0] in [x["id"] for x in body["results"]]
    first, second = scripted_planner.bodies
    assert "n" not in first and second["n"] == 2, "the samples are drawn for every search"
    assert {"plan_ms", "engine_ms", "fetch_ms"} <= set(body["timings"])
    assert metric(fused_api, "proretrieval_api_fused_total", outcome="answered") == answered + 1


def test_when_no_program_runs_the_fallback_answers(fused_api: Api, scripted_planner: ScriptedPlanner) -> None:
    scripted_planner.completion = "no program here"
    scripted_planner.samples = ["still none"]
    failed = metric(fused_api, "proretrieval_api_fused_total", outcome="failed")
    body = fused_api.client.post("/v1/search", json={"query": QUERY, "k": 5}).json()
    assert body["source"] == "fallback" and body["fusion"] is None and body["results"]
    assert body["fallback"]["reason"].startswith("planner_output_"), "the program's own failure is the reason"
    assert metric(fused_api, "proretrieval_api_fused_total", outcome="failed") == failed + 1


def test_under_the_unanimous_gate_programs_that_agree_answer_alone(
    engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner, scripted_planner: ScriptedPlanner
) -> None:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, guided_samples=2)
    api = Api(engines, planner, ApiSettings(warmup=False, fuse="self-query", fuse_gate="unanimous"))
    try:
        scripted_planner.completion = json.dumps(GOOD)
        scripted_planner.samples = [json.dumps(GOOD)]
        body = api.client.post("/v1/search", json={"query": QUERY, "k": 10}).json()
        own = engines["ecommerce"].execute(parse_program(json.dumps(GOOD)), 10)
        assert body["source"] == "planner" and body["fusion"]["unanimous"] and "fused" not in body["repairs"]
        assert [x["id"] for x in body["results"]] == list(own.ids), "the program's own ranking"
        scripted_planner.samples = [json.dumps(GOOD), json.dumps(CHEAP)]
        body = api.client.post("/v1/search", json={"query": QUERY, "k": 10}).json()
        assert not body["fusion"]["unanimous"] and "fused" in body["repairs"], "one sample disagrees: fused"
    finally:
        api.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fuse": "bm25"}, "serving.api.fuse must be one of none, self-query, got 'bm25'"),
        (
            {"fuse_gate": "majority"},
            "serving.api.fuse_gate must be one of none, unanimous, familiar, got 'majority'",
        ),
    ],
)
def test_an_unknown_fusion_setting_is_a_one_line_config_error(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ApiSettings(**settings)
    assert str(info.value) == message


UNLIKE = "zebra striped garden hose reel for a sailboat"


def test_under_the_familiar_gate_a_request_worded_like_training_is_answered_by_its_program_alone(
    engines: dict[str, Engine], small_index_cfg: Config, gated_card: Path,
    scripted_planner_server: ScriptedPlanner, scripted_planner: ScriptedPlanner,
) -> None:  # fmt: skip
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, guided_samples=2,
                              card=str(gated_card), embedder=small_index_cfg.embedder)  # fmt: skip
    api = Api(engines, planner, ApiSettings(warmup=False, fuse="self-query", fuse_gate="familiar"))
    threshold = json.loads((gated_card / CARD).read_text())["familiarity"]["threshold"]["ecommerce"]
    try:
        scripted_planner.completion = json.dumps(GOOD)
        scripted_planner.samples = [json.dumps(CHEAP)] * 2
        body = api.client.post("/v1/search", json={"query": QUERY, "k": 10}).json()
        own = engines["ecommerce"].execute(parse_program(json.dumps(GOOD)), 10)
        assert body["source"] == "planner" and body["fusion"]["familiar"] and "fused" not in body["repairs"]
        assert (
            body["fusion"]["familiarity"] == pytest.approx(1.0, abs=1e-4) and not body["fusion"]["unanimous"]
        )
        assert [x["id"] for x in body["results"]] == list(own.ids), (
            "the program's own ranking, samples disagreeing"
        )
        assert scripted_planner.calls == 1 and body["fusion"]["programs"] == 1, "no sample was drawn for it"
        assert (body["fusion"]["partner_ids"], body["fusion"]["weight"]) == ([], 0.0), (
            "nor did the retriever run"
        )
        body = api.client.post("/v1/search", json={"query": UNLIKE, "k": 10}).json()
        assert body["fusion"]["familiarity"] < threshold and not body["fusion"]["familiar"]
        assert "fused" in body["repairs"], "wording unlike any training request is fused"
        scripted_planner.completion = json.dumps(
            {**GOOD, "sql": GOOD_SQL.replace("price < 200", "price < 0")}
        )
        calls = scripted_planner.calls
        body = api.client.post("/v1/search", json={"query": QUERY, "k": 10}).json()
        assert not body["fusion"]["familiar"] and "fused" in body["repairs"], (
            "a familiar program that ranks nothing"
        )
        assert scripted_planner.calls == calls + 2 and body["fusion"]["programs"] == 3, (
            "then its samples are drawn"
        )
        mail = {"sql": "SELECT id FROM emails WHERE id IN <text_1>",
                "retrieval_list": [{"type": "text", "field": "body", "query": "contract renewal"}]}  # fmt: skip
        scripted_planner.completion = json.dumps(mail)
        scripted_planner.samples = [json.dumps(mail)] * 2
        body = api.client.post("/v1/search", json={"query": QUERY, "domain": "email", "k": 10}).json()
        assert body["source"] == "planner" and "fused" in body["repairs"], body
        assert body["fusion"]["familiarity"] is None, "a corpus the gate has no training requests of is fused"
    finally:
        api.close()


def test_the_familiar_gate_without_a_card_refuses_to_start_in_one_line(
    engines: dict[str, Engine], scripted_planner_server: ScriptedPlanner
) -> None:
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0)
    service = QueryService(
        engines, planner, ApiSettings(warmup=False, fuse="self-query", fuse_gate="familiar")
    )
    with pytest.raises(ConfigError, match=r"^serving\.api\.fuse_gate familiar needs the planner's card"):
        asyncio.run(service.start())
    asyncio.run(service.stop())


def test_the_start_logs_each_stage_with_its_seconds(
    engines: dict[str, Engine], small_index_cfg: Config, gated_card: Path,
    scripted_planner_server: ScriptedPlanner, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A slow start can be read off the log: the gate's vectors per corpus, then each engine's first search."""
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0, card=str(gated_card),
                              embedder=small_index_cfg.embedder)  # fmt: skip
    service = QueryService(
        engines, planner, ApiSettings(warmup=True, fuse="self-query", fuse_gate="familiar")
    )
    with caplog.at_level(logging.INFO, logger=START_LOG.name):
        asyncio.run(service.start())
    asyncio.run(service.stop())
    lines = [r.getMessage() for r in caplog.records if r.name == START_LOG.name]
    stages = [re.sub(r": \d+\.\d s$", "", line) for line in lines]
    assert stages == [
        f"start: ecommerce's familiarity gate over {len(GATE_TRAINING)} training requests",
        *(f"start: {d}'s engine warmed up (a first search)" for d in engines),
    ], lines
