"""The app factory both HTTP services use, on a tiny app of its own: the probes, the one-line 422 and the
429 of the in-flight limit, driven in process by FastAPI's test client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict

from serving.http.app import create_service_app, overloaded_response
from serving.http.limit import InflightLimit, Overloaded


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    count: int


class Tiny:
    """A service with one route, ``POST /v1/echo``, under an in-flight limit of one."""

    def __init__(self) -> None:
        self.ready = True
        self.limit = InflightLimit(1, retry_after_s=7)
        self.refused: list[tuple[str, int]] = []
        registry = CollectorRegistry()
        self.echoes = Counter("tiny_echoes", "Echo requests answered.", registry=registry)

        async def readiness() -> dict[str, Any]:
            return {"ready": self.ready, "checks": {"tiny": "ok" if self.ready else "starting"}}

        self.app = create_service_app(
            "tiny", registry=registry, readiness=readiness, on_rejection=lambda *got: self.refused.append(got)
        )

        @self.app.post("/v1/echo")
        async def echo(item: Item) -> JSONResponse:
            try:
                with self.limit:
                    self.echoes.inc()
                    return JSONResponse(item.model_dump())
            except Overloaded as exc:
                self.refused.append((exc.reason, 429))
                return overloaded_response(exc)


@pytest.fixture
def tiny() -> Iterator[tuple[Tiny, TestClient]]:
    service = Tiny()
    with TestClient(service.app) as client:
        yield service, client


def test_healthz_answers_ok(tiny: tuple[Tiny, TestClient]) -> None:
    _, client = tiny
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readyz_is_200_or_503_with_the_services_body(tiny: tuple[Tiny, TestClient]) -> None:
    service, client = tiny
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"ready": True, "checks": {"tiny": "ok"}}
    service.ready = False
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json() == {"ready": False, "checks": {"tiny": "starting"}}


def test_metrics_are_the_services_registry_as_prometheus_text(tiny: tuple[Tiny, TestClient]) -> None:
    _, client = tiny
    assert client.post("/v1/echo", json={"name": "a", "count": 1}).status_code == 200
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "tiny_echoes_total 1.0" in r.text


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"name": "a"}, "count: Field required"),
        (
            {"name": "a", "count": "many", "colour": 1},
            "count: Input should be a valid integer, unable to parse string as an integer (and 1 more)",
        ),
        ([1], "body: Input should be a valid dictionary or object to extract fields from"),
    ],
)
def test_a_request_that_fails_validation_is_a_one_line_422(
    tiny: tuple[Tiny, TestClient], body: Any, detail: str
) -> None:
    service, client = tiny
    r = client.post("/v1/echo", json=body)
    assert r.status_code == 422
    assert r.json() == {"error": "bad_request", "detail": detail}
    assert service.refused == [("bad_request", 422)]


def test_past_the_in_flight_limit_is_429_with_retry_after(tiny: tuple[Tiny, TestClient]) -> None:
    service, client = tiny
    service.limit.acquire()  # a request in flight holds the only slot
    r = client.post("/v1/echo", json={"name": "a", "count": 1})
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json() == {"error": "overloaded", "detail": "1 requests in flight; retry later"}
    assert service.refused == [("concurrency", 429)]
    service.limit.release()
    assert client.post("/v1/echo", json={"name": "a", "count": 1}).status_code == 200
    assert service.limit.count == 0
