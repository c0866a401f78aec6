"""The project's KServe model: NL -> program -> results behind KServe's v1 route, with the query API's fallback.

:class:`ProRetrievalModel` answers ``POST /v1/models/<name>:predict`` with
``{"instances": [{"query": ..., "domain": ..., "k": ...}]}``; each prediction is the query API's search answer
(program, candidates, results, timings, fallback) from :class:`serving.api.service.QueryService`. It is served by
:mod:`serving.kserve` (``python -m serving.kserve``), and :class:`serving.kserve_openai.ProRetrievalChatModel`
extends it with KServe's OpenAI-style chat route; both import it from here.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from typing import Any

import kserve  # type: ignore[import-untyped]
from kserve.errors import InvalidInput  # type: ignore[import-untyped]

from serving.api.schemas import SearchIn
from serving.api.service import QueryService, Refused
from serving.engine import Engine
from serving.planner import PlannerSettings
from serving.settings import ApiSettings


class PredictError(InvalidInput):  # type: ignore[misc]
    """A v1 request the model cannot read (KServe answers 400 with the message)."""


class ProRetrievalModel(kserve.Model):  # type: ignore[misc]
    """NL -> program -> results, with the query API's fallback; one v1 instance is one search."""

    def __init__(self, name: str, engines: Mapping[str, Engine], planner: PlannerSettings | None,
                 settings: ApiSettings | None = None) -> None:  # fmt: skip
        super().__init__(name)
        self.service = QueryService(engines, planner, settings or ApiSettings(warmup=False))
        self._started: asyncio.Lock | None = None
        self._running = False

    def load(self) -> bool:
        self.ready = True
        return True

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.Lock()
        async with self._started:
            if not self._running:
                await self.service.start()
                self._running = True

    async def predict(
        self, payload: Any, headers: dict[str, str] | None = None, response_headers: Any = None
    ) -> dict[str, Any]:
        await self._start()
        if isinstance(payload, bytes | str):
            try:
                payload = json.loads(payload)
            except ValueError:
                raise PredictError("the request body is not JSON") from None
        if not isinstance(payload, dict) or not isinstance(payload.get("instances"), list):
            raise PredictError('a v1 request is {"instances": [{"query": ..., "domain": ...}, ...]}')
        out = []
        for i, instance in enumerate(payload["instances"]):
            try:
                body = SearchIn.model_validate(instance)
                rid = (headers or {}).get("x-request-id") or uuid.uuid4().hex
                out.append(await self.service.search(rid, body))
            except Refused as exc:
                out.append({"error": exc.code, "detail": exc.detail})
            except ValueError as exc:
                raise PredictError(f"instances[{i}]: {' '.join(str(exc).split())[:300]}") from None
        return {"predictions": out}
