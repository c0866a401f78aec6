"""The query API's ASGI app: ``POST /v1/search``, ``/v1/plan`` and ``/v1/execute``, ``GET /healthz``,
``/readyz``, ``/metrics``, ``/v1/examples``, ``/openapi.json`` and the playground at ``/``. The probes and
the 422 of a request that fails validation come from the factory both HTTP services share
(:func:`serving.http.app.create_service_app`).

The routes answer through :class:`serving.api.service.QueryService` (the planner, the fallback that lets
``/v1/search`` always answer, execution-guided decoding, the deadlines); a request it refuses is answered
with its status and the one error body. A bad program given to ``/v1/execute`` is a 422 with the
language's error code, never a 500.

Limits: request bodies past ``max_body_bytes`` are 413, requests past ``max_nl_chars`` 422; past
``max_concurrent`` requests in flight a caller gets 429 with ``Retry-After``; planning, execution and the
fallback each have a deadline. With ``token`` set, ``/v1/*`` needs ``Authorization: Bearer <token>``
(the token is never logged). One JSON log line per request (logger ``serving.api``), with the request id
that the ``X-Request-ID`` header carries in and out.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from html import escape
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.api.schemas import ErrorOut, ExecuteIn, PlanIn, PlanOut, SearchIn, SearchOut
from serving.api.service import QueryService, Refused
from serving.engine import Engine
from serving.http.app import create_service_app, error_response, overloaded_response
from serving.http.limit import Overloaded
from serving.planner import PlannerError, PlannerSettings, planner_http_status
from serving.settings import ApiSettings

log = logging.getLogger("serving.api")

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
"""Example requests per corpus, answered by ``GET /v1/examples`` and written into the playground's page."""

_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorOut} for s in (401, 413, 422, 429, 503, 504)}


DOMAIN_LABELS = {"ecommerce": "ecommerce (products)", "email": "email"}
"""How the playground's corpus menu names each corpus."""


def _page(domains: Iterable[str]) -> str:
    """The playground for the served corpora: their menu entries and example requests (:data:`EXAMPLES`),
    so the page offers only what the server can answer.

    >>> page = _page(["email"])
    >>> '<option value="email">email</option>' in page, "ecommerce" in page.split("<script>")[0]
    (True, False)
    """
    served = list(domains)
    html = resources.files("serving.web").joinpath("index.html").read_text(encoding="utf-8")
    options = "".join(f'<option value="{d}">{escape(DOMAIN_LABELS.get(d, d))}</option>' for d in served)
    examples = json.dumps({d: list(EXAMPLES.get(d, ())) for d in served}).replace("</", "<\\/")
    return html.replace("<!--DOMAINS-->", options).replace("/*EXAMPLES*/{}", examples)


def create_app(
    engines: Mapping[str, Engine], planner: PlannerSettings | None = None, settings: ApiSettings | None = None
) -> FastAPI:
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

    metrics = service.metrics
    app = create_service_app(
        "ProRetrieval query API",
        registry=metrics.registry,
        readiness=service.ready,
        on_rejection=lambda reason, status: metrics.rejections.labels(reason).inc(),
        not_ready="the index or the planner does not answer",
        description="Natural language in, a retrieval program and ranked results out; BM25+dense RRF when planning fails.",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.add_middleware(Envelope, service=service, settings=cfg)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        metrics.rejections.labels(exc.code).inc()
        return error_response(exc.status, exc.code, exc.detail, exc.retry_after)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_page(service.engines))

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
            raise Refused(
                status, exc.code, exc.message, cfg.retry_after_s if status == 503 else None
            ) from None
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

        held = False
        try:
            refusal = self._refusal(headers, limited)
            if refusal is None and limited:
                refusal = self._admit()
                held = refusal is None
            if refusal is None:
                body, refusal = await self._body(receive)
                if refusal is None:
                    await self.app(scope, _replay(body, receive), send_marked)
            if refusal is not None:
                await refusal(scope, receive, send_marked)
        finally:
            if held:
                service.limit.release()
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
        """The answer to a request refused before its body is read and a slot taken, or None."""
        cfg, metrics = self.settings, self.service.metrics
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cfg.max_body_bytes):
            metrics.rejections.labels("too_large").inc()
            return error_response(
                413, "too_large", f"the body has {length} bytes; at most {cfg.max_body_bytes}"
            )
        if limited and cfg.token is not None and not _authorized(headers.get("authorization"), cfg.token):
            metrics.rejections.labels("unauthorized").inc()
            response = error_response(401, "unauthorized", "a bearer token is required")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        return None

    def _admit(self) -> Response | None:
        """Take a slot of the service's in-flight limit (``max_concurrent``), or the 429 that says it is full."""
        try:
            self.service.limit.acquire()
        except Overloaded as exc:
            self.service.metrics.rejections.labels(exc.reason).inc()
            return overloaded_response(exc)
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
                return b"", error_response(
                    413, "too_large", f"the body has more than {self.settings.max_body_bytes} bytes"
                )
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


_ROUTES = frozenset(
    {
        "/",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/search",
        "/v1/plan",
        "/v1/execute",
        "/v1/examples",
        "/openapi.json",
    }
)


def _request_id(given: str | None) -> str:
    if (
        given
        and len(given) <= 128
        and given.isascii()
        and given.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        return given
    return uuid.uuid4().hex


def _authorized(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())
