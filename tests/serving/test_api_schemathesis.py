"""Schemathesis against the query API's OpenAPI document on a loopback port: no generated request gets a 5xx.

The planner is a scripted endpoint that writes a hostile program, so every search goes through the
planner, the engine's rejection and the fallback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from indexing.config import Config
from serving.api.app import create_app
from serving.engine import Engine
from serving.http.server import ServerThread
from serving.planner import PlannerSettings
from serving.settings import ApiSettings
from tests.serving.planner_support import ScriptedPlanner

schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402


@pytest.fixture(scope="module")
def api_url(small_index_cfg: Config, scripted_planner_server: ScriptedPlanner) -> Iterator[str]:
    scripted_planner_server.completion = json.dumps(
        {"sql": "SELECT id FROM system.tables", "retrieval_list": []}
    )
    scripted_planner_server.status, scripted_planner_server.delay_s = 200, 0.0
    engines = {d: Engine.open(small_index_cfg, d) for d in ("ecommerce", "email")}
    planner = PlannerSettings(url=scripted_planner_server.url, model="m", retries=0)
    server = ServerThread(create_app(engines, planner, ApiSettings(max_k=50))).start()
    yield server.url
    server.stop()
    for e in engines.values():
        e.close()


def test_no_generated_request_gets_a_5xx(api_url: str) -> None:
    from hypothesis import given

    schema = schemathesis.openapi.from_url(api_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/search", "/v1/plan", "/v1/execute", "/healthz", "/readyz"}
    seen: dict[str, set[int]] = {}
    for op in operations:

        @given(case=op.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        def check(case) -> None:  # type: ignore[no-untyped-def]
            response = case.call(timeout=60)
            seen.setdefault(f"{case.method} {case.path}", set()).add(response.status_code)
            assert response.status_code < 500, (
                f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}"
            )

        check()
    assert all(codes for codes in seen.values())
    assert any(c == 422 for codes in seen.values() for c in codes)  # bad requests were generated and refused
