"""The app factory of the project's HTTP services and their one error shape.

:func:`create_service_app` gives each service the same probes (``GET /healthz``, ``/readyz`` and
``/metrics``) and the same answer to a request that fails validation; the service adds its own routes.
Every error body is ``{"error": <code>, "detail": <one line>}``; a 429 or 503 carries ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from serving.http.limit import Overloaded

Readiness = Callable[[], Awaitable[Mapping[str, Any]]]
"""What ``GET /readyz`` answers: a JSON object whose ``ready`` makes the status 200 (true) or 503."""

OnRejection = Callable[[str, int], None]
"""Called with the reason and the status of each request the factory's handlers refuse (the service
counts it in its metrics)."""


def error_response(status: int, code: str, detail: str, retry_after: int | None = None) -> JSONResponse:
    """The one error shape: ``{"error": code, "detail": one line}``, with ``Retry-After`` when given."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(
        {"error": code, "detail": " ".join(detail.split())}, status_code=status, headers=headers
    )


def overloaded_response(exc: Overloaded) -> JSONResponse:
    """429 ``overloaded`` with the limit's ``Retry-After``."""
    return error_response(429, exc.code, exc.message, exc.retry_after_s)


def validation_line(exc: RequestValidationError) -> str:
    """The first problem of a request that failed validation, as one line (``items.0.domain: Field required``)."""
    errors = exc.errors()
    if not errors:
        return "the request body is not valid"
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc or 'body'}: {first.get('msg', 'invalid')}{more}"


def probes(registry: CollectorRegistry, readiness: Readiness, not_ready: str) -> APIRouter:
    """``GET /healthz``, ``/readyz`` (``not_ready`` describes its 503) and ``/metrics`` (``registry``)."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @router.get("/readyz", responses={503: {"description": not_ready}})
    async def readyz() -> JSONResponse:
        """200 when the service is ready, 503 when not; the body says what was checked."""
        body = await readiness()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    @router.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """The service's Prometheus metrics, in the text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router


def create_service_app(
    title: str,
    *,
    registry: CollectorRegistry,
    readiness: Readiness,
    on_rejection: OnRejection,
    not_ready: str = "the service is not ready",
    **options: Any,
) -> FastAPI:
    """A service's app: the probes (:func:`probes`) and a request that fails validation answered 422
    ``bad_request`` with :func:`validation_line` (``on_rejection("bad_request", 422)`` counts it).
    ``options`` go to :class:`~fastapi.FastAPI` (``lifespan``, ``description``, ``docs_url`` ...)."""
    app = FastAPI(title=title, **options)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        on_rejection("bad_request", 422)
        return error_response(422, "bad_request", validation_line(exc))

    app.include_router(probes(registry, readiness, not_ready))
    return app
