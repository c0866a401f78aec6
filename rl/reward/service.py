"""The reward service: ``POST /v1/score``, ``GET /healthz``, ``GET /readyz`` and ``GET /metrics``.

verl calls the reward once per sample from many workers. The service merges the requests that
arrive within a short window (``window_ms``) into one batch, which :class:`~rl.reward.RewardScorer`
runs with one ``execute_many`` call per domain; the ``reward_batch_items`` histogram shows how well
that works. Load is bounded: past ``max_concurrent_requests`` requests in flight or ``max_queue_items``
items waiting, a caller gets 429 with ``Retry-After``. A bad request is a 4xx whose body is one line:
``{"error": <code>, "detail": <reason>}``. The probes, that error shape and the in-flight limit are the
ones the query API has too (:mod:`serving.http`).

Scores are deterministic (see :mod:`rl.reward.scorer`), so a client may retry any request whose
answer it did not get. The one exception is the service's batch deadline (``batch_timeout_s``),
a backstop behind the engine's per-program limits: an item answered at the deadline scores ``S_e = 0``
with ``timed_out`` set.

>>> from rl.reward.service import create_app  # doctest: +SKIP
>>> app = create_app(ServiceSettings(), RewardScorer.open(cfg, ["ecommerce"]), InstanceIndex())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from core.errors import ProReError
from indexing.schema import Role, schema_for
from rl.reward.errors import RewardError, RewardUnavailable
from rl.reward.instances import InstanceIndex
from rl.reward.metrics import ServiceMetrics
from rl.reward.scorer import RewardItem, RewardResult, RewardScorer
from rl.reward.settings import ServiceSettings
from serving.dsl import Program, Retrieval
from serving.http.app import create_service_app, error_response, overloaded_response
from serving.http.limit import InflightLimit, Overloaded

# -- wire format ----------------------------------------------------------------------------------


class ScoreItemIn(BaseModel):
    """One item of ``POST /v1/score``: a completion and what it is scored against."""

    model_config = ConfigDict(extra="forbid")

    completion: str
    domain: str
    instance_id: str | None = None
    """A benchmark instance id: the service looks its gold id (and relevant set) up."""
    gold_id: str | None = None
    relevant: list[str] | None = Field(
        default=None, validation_alias=AliasChoices("relevant", "relevant_ids")
    )
    """Ids that satisfy the request (``satisfy`` accuracy); the gold id counts as relevant too.
    Also read as ``relevant_ids``."""
    budget: int | None = Field(default=None, ge=1, validation_alias=AliasChoices("budget", "length_budget"))
    """Length budget of ``S_l`` in the service's unit (``length_unit`` of each result). Also read as
    ``length_budget``."""


class ScoreRequestIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ScoreItemIn] = Field(min_length=1)


# -- coalescing -----------------------------------------------------------------------------------


@dataclass
class _Pending:
    items: list[RewardItem]
    future: asyncio.Future[list[RewardResult]]


class Coalescer:
    """Merges concurrent requests into batches and runs them, one at a time, on an engine thread."""

    def __init__(self, scorer: RewardScorer, settings: ServiceSettings) -> None:
        self.scorer = scorer
        self.settings = settings
        self.metrics: ServiceMetrics | None = None
        self._queue: deque[_Pending] = deque()
        self._depth = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(settings.engine_workers, thread_name_prefix="reward-engine")
        self._running: set[asyncio.Task[None]] = set()

    @property
    def depth(self) -> int:
        """Items waiting to be scored."""
        return self._depth

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="reward-coalescer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._running):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(RewardUnavailable("the reward service is shutting down"))
        self._depth = 0
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run_in_engine(self, items: Sequence[RewardItem]) -> list[RewardResult]:
        """Score ``items`` on the engine thread, outside any batch (warm-up)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self.scorer.score, list(items)
        )

    async def submit(self, items: list[RewardItem]) -> list[RewardResult]:
        """Queue ``items`` for the next batch and wait for their results; :class:`Overloaded` when full."""
        if self._wake is None:
            raise RewardUnavailable("the reward service is not running")
        if self._depth + len(items) > self.settings.max_queue_items:
            raise Overloaded(
                "queue_full",
                f"{self._depth} items are waiting; at most {self.settings.max_queue_items}",
                self.settings.retry_after_s,
            )
        future: asyncio.Future[list[RewardResult]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(items, future))
        self._depth += len(items)
        self._wake.set()
        return await future

    async def _run(self) -> None:
        assert self._wake is not None
        window = self.settings.window_ms / 1000
        # One slot per engine thread: a batch is taken from the queue only when a thread is free for it, so
        # with one worker the next batch holds everything that arrived while the last one ran.
        slots = asyncio.Semaphore(self.settings.engine_workers)
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if window > 0:
                await asyncio.sleep(window)  # let the other samples of this step join
            while self._queue:
                await slots.acquire()
                if not self._queue:
                    slots.release()
                    break
                task = loop.create_task(self._score(self._take()))
                self._running.add(task)

                def done(t: asyncio.Task[None]) -> None:
                    self._running.discard(t)
                    slots.release()

                task.add_done_callback(done)

    def _take(self) -> list[_Pending]:
        """Whole requests, up to ``max_batch_items`` (a larger request is a batch of its own)."""
        batch: list[_Pending] = []
        size = 0
        while self._queue and (
            not batch or size + len(self._queue[0].items) <= self.settings.max_batch_items
        ):
            pending = self._queue.popleft()
            batch.append(pending)
            size += len(pending.items)
        self._depth -= size
        return batch

    async def _score(self, batch: list[_Pending]) -> None:
        items = [item for pending in batch for item in pending.items]
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        running = loop.run_in_executor(self._executor, self.scorer.score, items)
        try:
            results = await asyncio.wait_for(asyncio.shield(running), self.settings.batch_timeout_s)
        except TimeoutError:
            # Answer now; the engine finishes the batch in its thread and the next batch waits for it.
            results = [self.scorer.unscored(item) for item in items]
            self._deliver(batch, items, results, time.perf_counter() - start)
            with contextlib.suppress(Exception):
                await running
            return
        except asyncio.CancelledError:  # the service is stopping
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(RewardUnavailable("the reward service is shutting down"))
            raise
        except Exception as exc:
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        self._deliver(batch, items, results, time.perf_counter() - start)

    def _deliver(
        self, batch: list[_Pending], items: list[RewardItem], results: list[RewardResult], seconds: float
    ) -> None:
        if self.metrics is not None:
            self.metrics.observe_batch(items, results, seconds, len(batch))
        at = 0
        for pending in batch:
            n = len(pending.items)
            if not pending.future.done():  # a caller that went away leaves a cancelled future
                pending.future.set_result(results[at : at + n])
            at += n


# -- the app --------------------------------------------------------------------------------------


def warmup_items(domains: Sequence[str]) -> list[RewardItem]:
    """One program per domain that loads its embedder and touches its table."""
    out = []
    for domain in domains:
        schema = schema_for(domain)
        text = next(f.name for f in schema.fields if f.role == Role.TEXT)
        entry = Retrieval("text", text, "warm up")
        sql = f"SELECT id FROM {schema.table} WHERE id IN {Program.placeholder(0, entry)}"
        program = Program(sql, (entry,))
        out.append(RewardItem(program.to_json(), domain, gold_id="-", relevant=frozenset()))
    return out


class ServiceState:
    """What the routes share: settings, scorer, instances, coalescer, metrics, readiness."""

    def __init__(self, settings: ServiceSettings, scorer: RewardScorer, instances: InstanceIndex) -> None:
        self.settings = settings
        self.scorer = scorer
        self.instances = instances
        self.coalescer = Coalescer(scorer, settings)
        self.limit = InflightLimit(settings.max_concurrent_requests, settings.retry_after_s)
        """Score requests in flight, each holding a slot from before its items are resolved."""
        self.ready = False
        self.metrics = ServiceMetrics(
            scorer.cache_stats, lambda: self.coalescer.depth, lambda: self.limit.count
        )
        self.coalescer.metrics = self.metrics

    def resolve(self, items: Sequence[ScoreItemIn]) -> list[RewardItem]:
        """Typed items, each checked; the first bad one raises a :class:`RewardError` naming its index."""
        out = []
        for i, x in enumerate(items):
            try:
                gold = x.gold_id
                relevant = frozenset(x.relevant) if x.relevant is not None else None
                if x.instance_id is not None:
                    answer = self.instances.answer(x.domain, x.instance_id)
                    if gold is not None and gold != answer.gold_id:
                        raise RewardError(
                            f"gold_id {gold!r} is not instance {x.instance_id!r}'s ({answer.gold_id!r})",
                            code="bad_item",
                        )
                    gold = answer.gold_id
                    relevant = relevant if relevant is not None else answer.relevant
                item = RewardItem(x.completion, x.domain, gold, relevant, x.budget)
                self.scorer.check(item)
            except RewardError as exc:
                raise RewardError(f"items[{i}]: {exc.message}", code=exc.code) from None
            out.append(item)
        return out


def create_app(
    settings: ServiceSettings, scorer: RewardScorer, instances: InstanceIndex | None = None
) -> FastAPI:
    """The reward service's ASGI app on an opened scorer (the caller owns and closes the scorer)."""
    state = ServiceState(settings, scorer, instances or InstanceIndex())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.coalescer.start()
        if settings.warmup:
            await state.coalescer.run_in_engine(warmup_items(sorted(scorer.engines)))
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            await state.coalescer.stop()

    async def readiness() -> dict[str, Any]:
        return {
            "ready": state.ready,
            "domains": sorted(scorer.engines),
            "instances": len(state.instances),
            "accuracy": scorer.config.accuracy,
            "length_unit": scorer.unit,
        }

    def rejected(reason: str, status: int) -> None:
        # A request refused before the score route runs is counted by status here, as the route counts its own.
        state.metrics.rejections.labels(reason).inc()
        state.metrics.requests.labels(str(status)).inc()

    app = create_service_app(
        "ProRetrieval reward service",
        registry=state.metrics.registry,
        readiness=readiness,
        on_rejection=rejected,
        not_ready="the service is starting or stopping",
        lifespan=lifespan,
    )
    app.state.reward = state
    retry = settings.retry_after_s

    @app.post("/v1/score")
    async def score(body: ScoreRequestIn) -> JSONResponse:
        start = time.perf_counter()
        response = await _score(body)
        state.metrics.requests.labels(str(response.status_code)).inc()
        state.metrics.request_seconds.observe(time.perf_counter() - start)
        return response

    async def _score(body: ScoreRequestIn) -> JSONResponse:
        if not state.ready:
            state.metrics.rejections.labels("not_ready").inc()
            return error_response(503, "not_ready", "the reward service is starting", retry)
        if len(body.items) > settings.max_request_items:
            state.metrics.rejections.labels("too_large").inc()
            return error_response(
                413, "too_large", f"{len(body.items)} items; at most {settings.max_request_items} a request"
            )
        try:
            with state.limit:
                try:
                    items = state.resolve(body.items)
                except RewardError as exc:
                    state.metrics.rejections.labels("bad_item").inc()
                    return error_response(422, exc.code, exc.message)
                results = await state.coalescer.submit(items)
        except Overloaded as exc:  # the in-flight limit or the coalescer's queue
            state.metrics.rejections.labels(exc.reason).inc()
            return overloaded_response(exc)
        except ProReError as exc:
            status = 503 if exc.retryable else 500
            return error_response(status, exc.code, exc.message, retry if exc.retryable else None)
        return JSONResponse({"results": [r.to_dict() for r in results]})

    return app
