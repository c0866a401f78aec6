"""The query API's ASGI app: ``POST /v1/search``, ``/v1/plan`` and ``/v1/execute``, ``GET /healthz``,
``/readyz``, ``/metrics``, ``/openapi.json`` and the playground at ``/``.

``/v1/search`` always answers. When the planner fails, times out, or writes a program that does not parse,
validate or run, the answer comes from the fallback: BM25 and dense retrieval over the corpus's main text
field fused by reciprocal rank, written as a program the engine runs like any other
(``SELECT id FROM t WHERE id IN <text_1> OR id IN <text_2>``, a ``sparse`` and a ``dense`` entry; the
ranking contract sums their RRF terms). The response says ``"source": "fallback"`` with the reason, and
``proretrieval_api_fallbacks_total`` counts it. With execution-guided decoding on
(``PlannerSettings.guided_samples``), a first program that does not parse, validate or run gets one second
pass before the fallback: sampled programs run in one batch, and the ranking most of them agree on answers
(``"guided"`` in the response, ``proretrieval_api_guided_total``). A bad program given to ``/v1/execute``
is a 422 with the language's error code, never a 500.

Limits: request bodies past ``max_body_bytes`` are 413, requests past ``max_nl_chars`` 422; past
``max_concurrent`` requests in flight a caller gets 429 with ``Retry-After``; planning, execution and the
fallback each have a deadline. With ``token`` set, ``/v1/*`` needs ``Authorization: Bearer <token>``
(the token is never logged). One JSON log line per request (logger ``serving.api``), with the request id
that the ``X-Request-ID`` header carries in and out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
import unicodedata
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Literal

from cachetools import LRUCache
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from indexing.errors import ProReError
from indexing.schema import Role, schema_for
from serving.api.server import error_response, validation_line
from serving.api.settings import ApiSettings
from serving.dsl import DslError, Program, Retrieval, parse_program
from serving.dsl.grounding import read_column_values
from serving.engine import Engine, ExecutionResult
from serving.engine.results import consensus
from serving.planner import Plan, Planner, PlannerError, PlannerSettings, planner_http_status

log = logging.getLogger("serving.api")

MAIN_TEXT: Mapping[str, str] = {"ecommerce": "description", "email": "body"}
"""The text field the fallback searches per corpus (any other corpus: its first text field)."""

SHOWN_FIELDS: Mapping[str, tuple[str, ...]] = {
    "ecommerce": ("title", "brand", "category", "price", "rating", "color"),
    "email": ("subject", "sender", "folder", "date", "has_attachment"),
}
"""Fields returned with each result when a request names none."""

EXAMPLES: Mapping[str, tuple[str, ...]] = {
    "ecommerce": (
        "wireless headphones under $200 with great noise cancelling",
        "a white desk lamp rated above 4 stars",
    ),
    "email": (
        "unread emails in my inbox about the contract renewal",
        "messages with an attachment about the quarterly budget",
    ),
}
"""Example requests, shown by the playground and ``GET /v1/examples``."""


# -- wire format -----------------------------------------------------------------------------------

Domain = Literal["ecommerce", "email"]


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="The request in natural language.")
    domain: Domain = "ecommerce"
    k: int = Field(default=10, ge=1)
    fields: list[str] | None = Field(default=None, description="Fields returned per result.")


class PlanIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    domain: Domain = "ecommerce"


class ExecuteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    program: dict[str, Any] | str = Field(description="A program (JSON object or its text), DESIGN.md section 3.")
    domain: Domain = "ecommerce"
    k: int = Field(default=10, ge=1)
    fields: list[str] | None = None


class ResultOut(BaseModel):
    rank: int
    id: str
    score: float
    fields: dict[str, Any]


class PlaceholderOut(BaseModel):
    name: str
    type: str
    field: str
    query: str
    mode: str
    candidates: list[str]


class FallbackOut(BaseModel):
    reason: str
    detail: str


class GuidedOut(BaseModel):
    """How execution-guided decoding answered: the greedy program's failure, and the samples' vote."""

    reason: str
    detail: str
    samples: int
    """Samples asked for."""
    ran: int
    """Samples that were programs and ranked something."""
    agreeing: int
    """Samples whose ranking is the one answered."""


class SearchOut(BaseModel):
    request_id: str
    domain: str
    query: str | None = None
    source: Literal["planner", "fallback", "program"]
    fallback: FallbackOut | None = None
    guided: GuidedOut | None = None
    """Set when the planner's first program failed and a sampled one answered (``repairs`` then holds
    ``execution_guided``)."""
    program: dict[str, Any]
    planner_program: dict[str, Any] | None = None
    """What the planner wrote first when it failed (it parsed but did not run), under the fallback or a
    guided answer."""
    repairs: list[str] = []
    placeholders: list[PlaceholderOut]
    sql: str
    results: list[ResultOut]
    timings: dict[str, float]


class PlanOut(BaseModel):
    request_id: str
    domain: str
    program: dict[str, Any]
    completion: str
    repairs: list[str]
    timings: dict[str, float]


class ErrorOut(BaseModel):
    error: str
    detail: str


_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (401, 413, 422, 429, 503, 504)
}


# -- metrics ---------------------------------------------------------------------------------------


class ApiMetrics:
    """The API's Prometheus metrics, in a registry of their own."""

    def __init__(self, inflight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        p = "proretrieval_api_"
        self.requests = Counter(p + "requests_total", "Requests by route and status", ["route", "status"], registry=self.registry)
        self.seconds = Histogram(p + "request_seconds", "Request latency by route", ["route"], registry=self.registry)
        self.stages = Histogram(
            p + "stage_seconds", "Latency by stage (plan, engine, fetch, fallback, guided, guided_engine)", ["stage"], registry=self.registry,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
        )  # fmt: skip
        self.fallbacks = Counter(p + "fallbacks_total", "Searches answered by the fallback, by reason", ["reason"], registry=self.registry)
        self.guided = Counter(p + "guided_total", "Execution-guided second passes, by outcome (answered: a sample ran; "
                              "failed: none did, the fallback answered)", ["outcome"], registry=self.registry)  # fmt: skip
        self.rejections = Counter(p + "rejections_total", "Requests refused, by reason", ["reason"], registry=self.registry)
        self.inflight = Gauge(p + "inflight_requests", "Requests under /v1 in flight", registry=self.registry)
        self.inflight.set_function(lambda: float(inflight()))


# -- the service -----------------------------------------------------------------------------------


class Refused(Exception):
    """A request answered with an error status (``status``, ``code``, one-line ``detail``)."""

    def __init__(self, status: int, code: str, detail: str, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.retry_after = status, code, detail, retry_after


def fallback_program(domain: str, query: str, *, max_query_chars: int = 256) -> Program:
    """BM25 + dense RRF over the corpus's main text field, as a program (see the module docstring)."""
    schema = schema_for(domain)
    text = MAIN_TEXT.get(domain) or next(f.name for f in schema.fields if f.role is Role.TEXT)
    q = clean_query(query)[:max_query_chars] or "-"
    return Program(
        sql=f"SELECT id FROM {schema.table} WHERE id IN <text_1> OR id IN <text_2>",
        retrieval_list=(
            Retrieval(type="text", field=text, query=q, mode="sparse"),
            Retrieval(type="text", field=text, query=q, mode="dense"),
        ),
    )


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def clean_query(text: str) -> str:
    """``text`` with control and invisible characters dropped (an entry's query may hold none) and
    whitespace collapsed; what the fallback searches for."""
    return " ".join("".join(" " if ch.isspace() else ch for ch in text if ch.isspace() or unicodedata.category(ch) not in _INVISIBLE).split())


class QueryService:
    """The engines (one per corpus, each on a thread of its own), the planner, metrics and limits."""

    def __init__(self, engines: Mapping[str, Engine], planner: PlannerSettings | None, settings: ApiSettings) -> None:
        self.engines = dict(engines)
        self.planner_settings = planner
        self.planner: Planner | None = None
        self.settings = settings
        self.inflight = 0
        self.metrics = ApiMetrics(lambda: self.inflight)
        self._executors = {d: ThreadPoolExecutor(1, thread_name_prefix=f"engine-{d}") for d in self.engines}
        self._docs: LRUCache[tuple[str, tuple[str, ...], str], dict[str, Any]] = LRUCache(settings.doc_cache_rows)

    async def start(self) -> None:
        if self.planner_settings is not None:
            values = None
            if self.planner_settings.output == "grounded":  # the literals a grounded program may name
                values = {d: read_column_values(e.handle, e.schema) for d, e in self.engines.items()}
            self.planner = Planner(self.planner_settings, values=values)
        if self.settings.warmup:
            for domain in self.engines:
                with contextlib.suppress(Exception):
                    await self._engine(domain, fallback_program(domain, "warm up"), 1, 60.0, "warmup")

    async def stop(self) -> None:
        if self.planner is not None:
            await self.planner.aclose()
        for ex in self._executors.values():
            ex.shutdown(wait=False, cancel_futures=True)

    def engine_of(self, domain: str) -> Engine:
        if domain not in self.engines:
            raise Refused(422, "unknown_domain", f"this service has no index of {domain!r}; it serves {', '.join(sorted(self.engines))}")
        return self.engines[domain]

    async def _engine(self, domain: str, program: Program, k: int, deadline: float, stage: str) -> ExecutionResult:
        engine = self.engine_of(domain)
        result: ExecutionResult = await self._on_engine(domain, lambda: engine.execute(program, k), deadline, stage)
        return result

    async def _on_engine(self, domain: str, call: Callable[[], Any], deadline: float, stage: str) -> Any:
        """``call`` on ``domain``'s engine thread within ``deadline`` (TimeoutError past it); ``stage``'s
        latency observed either way."""
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        running = loop.run_in_executor(self._executors[domain], call)
        try:
            return await asyncio.wait_for(asyncio.shield(running), deadline)
        finally:
            self.metrics.stages.labels(stage).observe(time.perf_counter() - start)

    async def _fetch(self, domain: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The shown fields of ``ids``; rows come from the index once and then from an LRU cache (an
        index version's documents never change, and each engine serves one version)."""
        if not ids or not fields:
            return {}
        engine = self.engine_of(domain)
        start = time.perf_counter()
        key = tuple(fields)
        out: dict[str, dict[str, Any]] = {}
        missing = []
        for doc in ids:
            row = self._docs.get((domain, key, doc))
            if row is None:
                missing.append(doc)
            else:
                out[doc] = row
        if missing:
            loop = asyncio.get_running_loop()
            docs = await loop.run_in_executor(self._executors[domain], engine.handle.fetch_docs, missing, ["id", *fields])
            for d in docs:
                out[str(d["id"])] = d
                self._docs[(domain, key, str(d["id"]))] = d
        self.metrics.stages.labels("fetch").observe(time.perf_counter() - start)
        return out

    def fields_of(self, domain: str, wanted: Sequence[str] | None) -> tuple[str, ...]:
        schema = schema_for(domain)
        if wanted is None:
            return SHOWN_FIELDS.get(domain, ())
        out = []
        for name in wanted:
            f = next((f for f in schema.fields if f.name == name), None)
            if f is None:
                raise Refused(422, "unknown_field", f"{schema.table} has no field {name!r}")
            if name != "id" and f.role is not Role.IMAGE:
                out.append(name)
        return tuple(dict.fromkeys(out))

    def check_nl(self, query: str) -> None:
        if len(query) > self.settings.max_nl_chars:
            raise Refused(422, "nl_too_long", f"the request has {len(query)} characters; at most {self.settings.max_nl_chars}")
        if not clean_query(query):
            raise Refused(422, "empty_query", "the request is blank (or holds only control characters)")

    def check_k(self, k: int) -> None:
        if k > self.settings.max_k:
            raise Refused(422, "bad_k", f"k is {k}; at most {self.settings.max_k}")

    async def plan(self, domain: str, query: str) -> Plan:
        if self.planner is None:
            raise PlannerError("no planner is configured (prore serve --planner-url)", code="planner_not_configured")
        start = time.perf_counter()
        try:
            return await self.planner.plan(domain, query, timeout_s=self.settings.plan_deadline_s)
        finally:
            self.metrics.stages.labels("plan").observe(time.perf_counter() - start)

    async def answer(
        self, request_id: str, domain: str, program: Program, k: int, fields: Sequence[str], timings: dict[str, float],
        *, source: str, query: str | None = None, fallback: FallbackOut | None = None,
        planner_program: Program | None = None, repairs: Sequence[str] = (), result: ExecutionResult | None = None,
        guided: GuidedOut | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        if result is None:
            t = time.perf_counter()
            result = await self._engine(domain, program, k, self.settings.execute_deadline_s, "engine")
            timings["engine_ms"] = (time.perf_counter() - t) * 1000
        for stage, ms in result.timings.items():
            timings[f"engine.{stage}_ms"] = ms
        t = time.perf_counter()
        docs = await self._fetch(domain, result.ids, fields)
        timings["fetch_ms"] = (time.perf_counter() - t) * 1000
        results = [
            {"rank": i, "id": doc, "score": score, "fields": _jsonable({f: docs.get(doc, {}).get(f) for f in fields})}
            for i, (doc, score) in enumerate(zip(result.ids, result.scores, strict=True), 1)
        ]
        placeholders = [
            {"name": f"{e.type}_{i}", "type": e.type, "field": e.field, "query": e.query, "mode": e.mode,
             "candidates": list(result.candidates.get(f"{e.type}_{i}", ()))}
            for i, e in enumerate(program.retrieval_list, 1)
        ]  # fmt: skip
        return {
            "request_id": request_id,
            "domain": domain,
            "query": query,
            "source": source,
            "fallback": fallback.model_dump() if fallback else None,
            "guided": guided.model_dump() if guided else None,
            "program": json.loads(program.to_json()),
            "planner_program": json.loads(planner_program.to_json()) if planner_program is not None else None,
            "repairs": list(repairs),
            "placeholders": placeholders,
            "sql": result.sql,
            "results": results,
            "timings": {name: round(ms, 3) for name, ms in timings.items()},
        }

    async def search(self, request_id: str, body: SearchIn) -> dict[str, Any]:
        self.engine_of(body.domain)
        self.check_nl(body.query)
        self.check_k(body.k)
        fields = self.fields_of(body.domain, body.fields)
        timings: dict[str, float] = {}
        start = time.perf_counter()
        reason: FallbackOut
        written: Program | None = None
        try:
            plan = await self.plan(body.domain, body.query)
        except PlannerError as exc:
            reason = FallbackOut(reason=exc.code, detail=" ".join(exc.message.split()))
        else:
            timings["plan_ms"] = (time.perf_counter() - start) * 1000
            written = plan.program
            t = time.perf_counter()
            try:
                result = await self._engine(body.domain, plan.program, body.k, self.settings.execute_deadline_s, "engine")
            except DslError as exc:
                reason = FallbackOut(reason=f"program_{exc.code}", detail=" ".join(exc.message.split()))
            except TimeoutError:
                reason = FallbackOut(reason="program_timeout", detail=f"the program did not finish within {self.settings.execute_deadline_s:g} s")
            except ProReError as exc:
                reason = FallbackOut(reason=f"program_{exc.code}", detail=" ".join(exc.message.split()))
            else:
                timings["engine_ms"] = (time.perf_counter() - t) * 1000
                return await self.answer(
                    request_id, body.domain, plan.program, body.k, fields, timings, source="planner",
                    query=body.query, repairs=plan.repairs, result=result,
                )  # fmt: skip
        if "plan_ms" not in timings:
            timings["plan_ms"] = (time.perf_counter() - start) * 1000
        if self.guides(reason):
            got = await self.guided_pass(body.domain, body.query, body.k, reason, timings)
            if got is not None:
                plan, result, guided = got
                return await self.answer(
                    request_id, body.domain, plan.program, body.k, fields, timings, source="planner", query=body.query,
                    planner_program=written, repairs=(*plan.repairs, "execution_guided"), result=result, guided=guided,
                )  # fmt: skip
        self.metrics.fallbacks.labels(reason.reason).inc()
        program = fallback_program(body.domain, body.query)
        t = time.perf_counter()
        try:
            result = await self._engine(body.domain, program, body.k, self.settings.fallback_deadline_s, "fallback")
        except TimeoutError:
            raise Refused(503, "fallback_timeout", f"the fallback did not finish within {self.settings.fallback_deadline_s:g} s",
                          self.settings.retry_after_s) from None  # fmt: skip
        except ProReError as exc:
            retry = exc.retryable or not isinstance(exc, DslError)
            raise Refused(503 if retry else 422, f"fallback_{exc.code}", exc.message,
                          self.settings.retry_after_s if retry else None) from None  # fmt: skip
        timings["fallback_ms"] = (time.perf_counter() - t) * 1000
        return await self.answer(
            request_id, body.domain, program, body.k, fields, timings, source="fallback", query=body.query,
            fallback=reason, planner_program=written, result=result,
        )  # fmt: skip

    def guides(self, reason: FallbackOut) -> bool:
        """Whether execution-guided decoding gets a second pass at a search whose first program failed:
        when it is on and the planner answered with something that did not parse, validate or run (not when
        the planner is unreachable or the program ran out of time, which sampling does not mend)."""
        s = self.planner_settings
        if self.planner is None or s is None or s.guided_samples <= 0:
            return False
        return reason.reason.startswith("planner_output_") or (
            reason.reason.startswith("program_") and reason.reason != "program_timeout"
        )

    async def guided_pass(
        self, domain: str, query: str, k: int, reason: FallbackOut, timings: dict[str, float]
    ) -> tuple[Plan, ExecutionResult, GuidedOut] | None:
        """Execution-guided decoding: ``guided_samples`` sampled programs in one planner call, run in one
        ``execute_many`` within the execution deadline; the plan and result of the ranking most samples
        agree on (:func:`serving.engine.results.consensus`), or None when no sample ranks anything."""
        assert self.planner is not None
        start = time.perf_counter()
        try:
            try:
                plans = await self.planner.samples(domain, query, timeout_s=self.settings.plan_deadline_s)
            except PlannerError:
                plans = []
            results: list[Any] = []
            if plans:
                engine = self.engine_of(domain)
                with contextlib.suppress(TimeoutError):
                    results = await self._on_engine(domain, lambda: engine.execute_many([p.program for p in plans], k),
                                                    self.settings.execute_deadline_s, "guided_engine")  # fmt: skip
        finally:
            timings["guided_ms"] = (time.perf_counter() - start) * 1000
            self.metrics.stages.labels("guided").observe(time.perf_counter() - start)
        rankings = [r.ids if isinstance(r, ExecutionResult) else None for r in results]
        at = consensus(rankings)
        self.metrics.guided.labels("failed" if at is None else "answered").inc()
        if at is None:
            return None
        assert self.planner_settings is not None
        ran = sum(1 for r in rankings if r)
        agreeing = rankings.count(rankings[at])
        guided = GuidedOut(reason=reason.reason, detail=reason.detail, samples=self.planner_settings.guided_samples,
                           ran=ran, agreeing=agreeing)  # fmt: skip
        return plans[at], results[at], guided

    async def execute(self, request_id: str, body: ExecuteIn) -> dict[str, Any]:
        self.engine_of(body.domain)
        self.check_k(body.k)
        fields = self.fields_of(body.domain, body.fields)
        source = body.program if isinstance(body.program, str) else json.dumps(body.program)
        try:
            program = parse_program(source, limits=self.engines[body.domain].dsl_limits)
            timings: dict[str, float] = {}
            return await self.answer(request_id, body.domain, program, body.k, fields, timings, source="program")
        except DslError as exc:
            raise Refused(422, exc.code, exc.message) from None
        except TimeoutError:
            raise Refused(504, "execute_timeout", f"the program did not finish within {self.settings.execute_deadline_s:g} s") from None
        except ProReError as exc:
            status = 503 if exc.retryable else 422
            raise Refused(status, exc.code, exc.message, self.settings.retry_after_s if exc.retryable else None) from None

    async def ready(self) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        for domain, engine in self.engines.items():
            program = Program(sql=f"SELECT id FROM {engine.schema.table} LIMIT 1", retrieval_list=())
            try:
                await self._engine(domain, program, 1, 5.0, "ready")
                checks[f"index:{domain}"] = "ok"
            except Exception as exc:
                checks[f"index:{domain}"] = type(exc).__name__
        if self.planner is None:
            checks["planner"] = "not configured"
        else:
            checks["planner"] = "ok" if await self.planner.ready() else "unreachable"
        ok = all(v in ("ok", "not configured") for v in checks.values()) and bool(self.engines)
        return {"ready": ok, "checks": checks}


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value if value is None or isinstance(value, bool | int | float | str) else str(value)
    return out


def _page() -> str:
    return resources.files("serving.web").joinpath("index.html").read_text(encoding="utf-8")


def create_app(engines: Mapping[str, Engine], planner: PlannerSettings | None = None, settings: ApiSettings | None = None) -> FastAPI:
    """The query API on opened engines (one per corpus; the caller owns and closes them)."""
    cfg = settings or ApiSettings()
    service = QueryService(engines, planner, cfg)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="ProRetrieval query API",
        description="Natural language in, a retrieval program and ranked results out; BM25+dense RRF when planning fails.",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    metrics = service.metrics
    app.add_middleware(Envelope, service=service, settings=cfg)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.rejections.labels("bad_request").inc()
        return error_response(422, "bad_request", validation_line(exc))

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        metrics.rejections.labels(exc.code).inc()
        return error_response(exc.status, exc.code, exc.detail, exc.retry_after)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_page())

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"description": "the index or the planner does not answer"}})
    async def readyz() -> JSONResponse:
        """Ready when every index and the planner (when configured) answer."""
        body = await service.ready()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    @app.get("/metrics", response_class=Response)
    async def metrics_route() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/examples")
    async def examples() -> dict[str, list[str]]:
        """Example requests per corpus."""
        return {d: list(v) for d, v in EXAMPLES.items() if d in service.engines}

    @app.post("/v1/search", response_model=SearchOut, responses=_ERRORS)
    async def search(body: SearchIn, request: Request) -> JSONResponse:
        """NL in: the program, each placeholder's candidates, ranked results with fields, per-stage timings.
        Answered by the fallback (``source: fallback``, with the reason) when planning or the program fails."""
        out = await service.search(request.state.request_id, body)
        return JSONResponse(out, headers={"X-ProRetrieval-Source": out["source"]})

    @app.post("/v1/plan", response_model=PlanOut, responses=_ERRORS)
    async def plan(body: PlanIn, request: Request) -> JSONResponse:
        """The planner's program for a request, not run."""
        service.engine_of(body.domain)
        service.check_nl(body.query)
        start = time.perf_counter()
        try:
            got = await service.plan(body.domain, body.query)
        except PlannerError as exc:
            status = planner_http_status(exc)
            raise Refused(status, exc.code, exc.message, cfg.retry_after_s if status == 503 else None) from None
        return JSONResponse({
            "request_id": request.state.request_id, "domain": body.domain, "program": json.loads(got.program.to_json()),
            "completion": got.completion, "repairs": list(got.repairs),
            "timings": {"plan_ms": round((time.perf_counter() - start) * 1000, 3)},
        })  # fmt: skip

    @app.post("/v1/execute", response_model=SearchOut, responses=_ERRORS)
    async def execute(body: ExecuteIn, request: Request) -> JSONResponse:
        """Run a given program; a program that does not parse, validate or run is a 422 with its code."""
        out = await service.execute(request.state.request_id, body)
        return JSONResponse(out, headers={"X-ProRetrieval-Source": "program"})

    return app


class Envelope:
    """Every request's envelope: size, token and concurrency checks, the request id, metrics and the log line.

    Plain ASGI middleware rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware``
    runs the app in a task behind memory streams, which cost about as much per request as the whole
    ``/v1/execute`` budget over the engine (2 ms). The body is read here once, checked against
    ``max_body_bytes`` whether or not the client sent a ``Content-Length``, and replayed to the app.
    """

    def __init__(self, app: ASGIApp, *, service: QueryService, settings: ApiSettings) -> None:
        self.app = app
        self.service = service
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        service, metrics = self.service, self.service.metrics
        headers = Headers(scope=scope)
        rid = _request_id(headers.get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid  # what routes read as request.state.request_id
        path: str = scope["path"]
        limited = path.startswith("/v1/")
        status, source = 500, None

        async def send_marked(message: Message) -> None:
            nonlocal status, source
            if message["type"] == "http.response.start":
                status = message["status"]
                marked = MutableHeaders(scope=message)
                source = marked.get("x-proretrieval-source")
                marked["X-Request-ID"] = rid
            await send(message)

        counted = False
        try:
            refusal = self._refusal(headers, limited)
            if refusal is None:
                if limited:
                    service.inflight += 1
                    counted = True
                body, refusal = await self._body(receive)
                if refusal is None:
                    await self.app(scope, _replay(body, receive), send_marked)
            if refusal is not None:
                await refusal(scope, receive, send_marked)
        finally:
            if counted:
                service.inflight -= 1
            seconds = time.perf_counter() - start
            route = path if path in _ROUTES else "other"
            metrics.requests.labels(route, str(status)).inc()
            metrics.seconds.labels(route).observe(seconds)
            client = scope.get("client")
            line = {
                "ts": round(time.time(), 3), "request_id": rid, "method": scope["method"], "path": path,
                "status": status, "ms": round(seconds * 1000, 2), "source": source,
                "client": client[0] if client else None,
            }  # fmt: skip
            log.info(json.dumps(line))

    def _refusal(self, headers: Headers, limited: bool) -> Response | None:
        """The answer to a request refused before its body is read, or None."""
        cfg, service, metrics = self.settings, self.service, self.service.metrics
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cfg.max_body_bytes):
            metrics.rejections.labels("too_large").inc()
            return error_response(413, "too_large", f"the body has {length} bytes; at most {cfg.max_body_bytes}")
        if limited and cfg.token is not None and not _authorized(headers.get("authorization"), cfg.token):
            metrics.rejections.labels("unauthorized").inc()
            response = error_response(401, "unauthorized", "a bearer token is required")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        if limited and service.inflight >= cfg.max_concurrent:
            metrics.rejections.labels("concurrency").inc()
            return error_response(429, "overloaded", f"{service.inflight} requests in flight; retry later", cfg.retry_after_s)
        return None

    async def _body(self, receive: Receive) -> tuple[bytes, Response | None]:
        """The whole request body, or a 413 once it grows past ``max_body_bytes``."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app sees an empty body and the disconnect after it
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_body_bytes:
                self.service.metrics.rejections.labels("too_large").inc()
                return b"", error_response(413, "too_large", f"the body has more than {self.settings.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks), None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then whatever the connection says next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_ROUTES = frozenset({"/", "/healthz", "/readyz", "/metrics", "/v1/search", "/v1/plan", "/v1/execute", "/v1/examples", "/openapi.json"})


def _request_id(given: str | None) -> str:
    if given and len(given) <= 128 and given.isascii() and given.replace("-", "").replace("_", "").replace(".", "").isalnum():
        return given
    return uuid.uuid4().hex


def _authorized(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())
