"""The query API's search service, free of any web framework: the query API's routes
(:mod:`serving.api.app`) and the KServe transformer (:mod:`serving.kserve`) both answer through
:class:`QueryService`.

A search always answers. When the planner fails, times out, or writes a program that does not parse,
validate or run, or runs and matches no document (``ApiSettings.fallback_on_empty``), the answer comes
from the fallback: BM25 and dense retrieval over the corpus's main text
field fused by reciprocal rank, written as a program the engine runs like any other
(``SELECT id FROM t WHERE id IN <text_1> OR id IN <text_2>``, a ``sparse`` and a ``dense`` entry; the
ranking contract sums their RRF terms). The answer says ``"source": "fallback"`` with the reason, and
``proretrieval_api_fallbacks_total`` counts it. With execution-guided decoding on
(``PlannerSettings.guided_samples``), a first program that does not parse, validate or run gets one second
pass before the fallback: sampled programs run in one batch, and the ranking most of them agree on answers
(``"guided"`` in the answer, ``proretrieval_api_guided_total``). A request the service will not answer
raises :class:`Refused` with its status and code (a bad program given to :meth:`QueryService.execute` is a
422 with the language's error code); planning, execution and the fallback each have a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cachetools import LRUCache

from core.errors import ConfigError, ProReError
from core.logs import timed
from indexing.schema import Role, schema_for
from serving.api.metrics import ApiMetrics
from serving.api.schemas import ExecuteIn, FallbackOut, FusionOut, GuidedOut, SearchIn
from serving.dsl import DslError, Program, Retrieval, parse_program
from serving.dsl.grounding import read_column_values
from serving.engine import Engine, ExecutionResult
from serving.engine.results import candidate_name, consensus, fuse, unanimous
from serving.familiarity import Familiarity, open_familiarity
from serving.http.limit import InflightLimit
from serving.planner import Plan, Planner, PlannerError, PlannerSettings
from serving.self_query import SelfQuery, SelfQueryPlan
from serving.settings import ApiSettings

MAIN_TEXT: Mapping[str, str] = {"ecommerce": "description", "email": "body"}
"""The text field the fallback searches per corpus (any other corpus: its first text field)."""

SHOWN_FIELDS: Mapping[str, tuple[str, ...]] = {
    "ecommerce": ("title", "brand", "category", "price", "rating", "color"),
    "email": ("subject", "sender", "folder", "date", "has_attachment"),
}
"""Fields returned with each result when a request names none."""


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
    entries = (
        Retrieval(type="text", field=text, query=q, mode="sparse"),
        Retrieval(type="text", field=text, query=q, mode="dense"),
    )
    either = " OR ".join(f"id IN {Program.placeholder(i, e)}" for i, e in enumerate(entries))
    return Program(sql=f"SELECT id FROM {schema.table} WHERE {either}", retrieval_list=entries)


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def clean_query(text: str) -> str:
    """``text`` with control and invisible characters dropped (an entry's query may hold none) and
    whitespace collapsed; what the fallback searches for."""
    return " ".join(
        "".join(
            " " if ch.isspace() else ch
            for ch in text
            if ch.isspace() or unicodedata.category(ch) not in _INVISIBLE
        ).split()
    )


START_LOG = logging.getLogger("serving.api.start")
"""Where the service says what its start-up is doing and how long each stage took (``prore serve`` logs it at
INFO, its default level)."""


class QueryService:
    """The engines (one per corpus, each on a thread of its own), the planner, metrics and limits."""

    def __init__(
        self, engines: Mapping[str, Engine], planner: PlannerSettings | None, settings: ApiSettings
    ) -> None:
        self.engines = dict(engines)
        self.planner_settings = planner
        self.planner: Planner | None = None
        self.settings = settings
        self.limit = InflightLimit(settings.max_concurrent, settings.retry_after_s)
        """Requests under ``/v1/`` in flight; the query API's envelope takes a slot per request."""
        self.metrics = ApiMetrics(lambda: self.limit.count)
        self._executors = {d: ThreadPoolExecutor(1, thread_name_prefix=f"engine-{d}") for d in self.engines}
        self._self_query: dict[str, SelfQuery] = {}
        self.familiarity: Familiarity | None = None
        """The planner card's familiarity gate, under ``serving.api.fuse_gate: familiar`` (opened at start)."""
        self._docs: LRUCache[tuple[str, tuple[str, ...], str], dict[str, Any]] = LRUCache(
            settings.doc_cache_rows
        )

    async def start(self) -> None:
        """Open the planner client, the familiarity gate and warm each engine, logging each stage's seconds
        (:data:`START_LOG`)."""
        if self.planner_settings is not None:
            values = None
            if self.planner_settings.output == "grounded":  # the literals a grounded program may name
                with timed(START_LOG, "start: the corpora's values for the grounded grammar"):
                    values = {d: read_column_values(e.handle, e.schema) for d, e in self.engines.items()}
            self.planner = Planner(self.planner_settings, values=values)
        if self.settings.fuse_gate == "familiar" and self.fuses():
            assert self.planner_settings is not None
            if self.planner_settings.card is None:
                raise ConfigError("serving.api.fuse_gate familiar needs the planner's card (--planner-card), "
                                  "which names its familiarity gate", code="bad_fuse")  # fmt: skip
            self.familiarity = open_familiarity(self.planner_settings.card)
            for domain in self.engines:  # fit each corpus's vectors now, not on its first search
                if domain in self.familiarity.threshold:
                    n = len(self.familiarity.requests.get(domain, ()))
                    with timed(START_LOG, f"start: {domain}'s familiarity gate over {n:,} training requests"):
                        await asyncio.to_thread(self.familiarity.space, domain)
        if self.settings.warmup:
            for domain in self.engines:
                with (
                    timed(START_LOG, f"start: {domain}'s engine warmed up (a first search)"),
                    contextlib.suppress(Exception),
                ):
                    await self._engine(domain, fallback_program(domain, "warm up"), 1, 60.0, "warmup")

    async def stop(self) -> None:
        if self.planner is not None:
            await self.planner.aclose()
        for ex in self._executors.values():
            ex.shutdown(wait=False, cancel_futures=True)

    def engine_of(self, domain: str) -> Engine:
        if domain not in self.engines:
            raise Refused(
                422,
                "unknown_domain",
                f"this service has no index of {domain!r}; it serves {', '.join(sorted(self.engines))}",
            )
        return self.engines[domain]

    async def _engine(
        self, domain: str, program: Program, k: int, deadline: float, stage: str
    ) -> ExecutionResult:
        engine = self.engine_of(domain)
        result: ExecutionResult = await self._on_engine(
            domain, lambda: engine.execute(program, k), deadline, stage
        )
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

    async def _fetch(
        self, domain: str, ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
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
            docs = await loop.run_in_executor(
                self._executors[domain], engine.handle.fetch_docs, missing, ["id", *fields]
            )
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
            raise Refused(
                422,
                "nl_too_long",
                f"the request has {len(query)} characters; at most {self.settings.max_nl_chars}",
            )
        if not clean_query(query):
            raise Refused(422, "empty_query", "the request is blank (or holds only control characters)")

    def check_k(self, k: int) -> None:
        if k > self.settings.max_k:
            raise Refused(422, "bad_k", f"k is {k}; at most {self.settings.max_k}")

    async def plan(self, domain: str, query: str) -> Plan:
        if self.planner is None:
            raise PlannerError(
                "no planner is configured (prore serve --planner-url)", code="planner_not_configured"
            )
        start = time.perf_counter()
        try:
            return await self.planner.plan(domain, query, timeout_s=self.settings.plan_deadline_s)
        finally:
            self.metrics.stages.labels("plan").observe(time.perf_counter() - start)

    async def answer(
        self, request_id: str, domain: str, program: Program, k: int, fields: Sequence[str], timings: dict[str, float],
        *, source: str, query: str | None = None, fallback: FallbackOut | None = None,
        planner_program: Program | None = None, repairs: Sequence[str] = (), result: ExecutionResult | None = None,
        guided: GuidedOut | None = None, fusion: FusionOut | None = None,
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
            {
                "rank": i,
                "id": doc,
                "score": score,
                "fields": _jsonable({f: docs.get(doc, {}).get(f) for f in fields}),
            }
            for i, (doc, score) in enumerate(zip(result.ids, result.scores, strict=True), 1)
        ]
        placeholders = []
        for i, e in enumerate(program.retrieval_list):
            name = candidate_name(i, e)  # the key of the entry's candidates, as the engine names it
            placeholders.append({"name": name, "type": e.type, "field": e.field, "query": e.query, "mode": e.mode,
                                 "candidates": list(result.candidates.get(name, ()))})  # fmt: skip
        return {
            "request_id": request_id,
            "domain": domain,
            "query": query,
            "source": source,
            "fallback": fallback.model_dump() if fallback else None,
            "guided": guided.model_dump() if guided else None,
            "fusion": fusion.model_dump() if fusion else None,
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
        if self.fuses():
            fused = await self.fused_search(body.domain, body.query, body.k, timings)
            if not isinstance(fused, FallbackOut):
                plan, result, fusion = fused
                return await self.answer(
                    request_id, body.domain, plan.program, body.k, fields, timings, source="planner",
                    query=body.query, repairs=(*plan.repairs, *(() if fusion.alone else ("fused",))), result=result,
                    fusion=fusion,
                )  # fmt: skip
            return await self.fall_back(request_id, body, fields, timings, fused, None)
        try:
            plan = await self.plan(body.domain, body.query)
        except PlannerError as exc:
            reason = FallbackOut(reason=exc.code, detail=" ".join(exc.message.split()))
        else:
            timings["plan_ms"] = (time.perf_counter() - start) * 1000
            written = plan.program
            t = time.perf_counter()
            try:
                result = await self._engine(
                    body.domain, plan.program, body.k, self.settings.execute_deadline_s, "engine"
                )
            except DslError as exc:
                reason = FallbackOut(reason=f"program_{exc.code}", detail=" ".join(exc.message.split()))
            except TimeoutError:
                reason = FallbackOut(
                    reason="program_timeout",
                    detail=f"the program did not finish within {self.settings.execute_deadline_s:g} s",
                )
            except ProReError as exc:
                reason = FallbackOut(reason=f"program_{exc.code}", detail=" ".join(exc.message.split()))
            else:
                timings["engine_ms"] = (time.perf_counter() - t) * 1000
                if result.ids or not self.settings.fallback_on_empty:
                    return await self.answer(
                        request_id, body.domain, plan.program, body.k, fields, timings, source="planner",
                        query=body.query, repairs=plan.repairs, result=result,
                    )  # fmt: skip
                reason = FallbackOut(
                    reason="program_empty", detail="the planner's program ran and matched no document"
                )
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
        return await self.fall_back(request_id, body, fields, timings, reason, written)

    async def fall_back(
        self, request_id: str, body: SearchIn, fields: Sequence[str], timings: dict[str, float], reason: FallbackOut,
        written: Program | None,
    ) -> dict[str, Any]:  # fmt: skip
        """The fallback's answer to a search the planner did not answer, for ``reason``."""
        self.metrics.fallbacks.labels(reason.reason).inc()
        program = fallback_program(body.domain, body.query)
        t = time.perf_counter()
        try:
            result = await self._engine(
                body.domain, program, body.k, self.settings.fallback_deadline_s, "fallback"
            )
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

    def fuses(self) -> bool:
        """Whether searches fuse the planner's programs with the self-querying retriever (``serving.api.fuse``)."""
        return self.settings.fuse != "none" and self.planner is not None

    def self_query(self, domain: str) -> SelfQuery:
        """``domain``'s self-querying retriever (its vocabulary read on first use, on the engine's thread)."""
        if domain not in self._self_query:
            engine = self.engine_of(domain)
            self._self_query[domain] = SelfQuery(engine.handle, engine.schema)
        return self._self_query[domain]

    async def fused_search(
        self, domain: str, query: str, k: int, timings: dict[str, float]
    ) -> tuple[Plan, ExecutionResult, FusionOut] | FallbackOut:
        """The planner's program and ``guided_samples`` samples, run in one ``execute_many`` beside the
        self-querying retriever's search (on the engine's thread, within the execution deadline), their
        rankings fused by weighted RRF (:func:`serving.engine.results.fuse`; the retriever weighs as much as
        all the programs asked for). Returns the first program that ran, with the fused ids and scores in
        place of its own, or the reason to fall back when no program ran.

        Under the familiar gate, a request worded like the planner's training requests runs its program
        first, alone: when that ranks something it is the answer, and no sample is drawn and the retriever
        does not run (the answer the fused path would give, at the cost of one planner call)."""
        assert self.planner is not None and self.planner_settings is not None
        start = time.perf_counter()
        plans: list[Plan] = []
        reason = FallbackOut(reason="program_none_ran", detail="no program of the planner's ran")
        try:
            plans.append(await self.plan(domain, query))
        except PlannerError as exc:
            reason = FallbackOut(reason=exc.code, detail=" ".join(exc.message.split()))
        greedy = bool(plans)  # plans[0] is the planner's program, not a sample
        similarity = None
        gate = self.familiarity
        if gate is not None and domain in gate.threshold:  # a corpus the planner has no gate for is fused
            similarity = (await asyncio.to_thread(gate.similarity, domain, [query]))[0]  # off the event loop
        near = greedy and gate is not None and similarity is not None and gate.reaches(domain, similarity)
        if near:
            assert similarity is not None
            answered = await self.familiar_answer(domain, plans[0], k, similarity, timings, start)
            if answered is not None:
                return answered
        asked = 1 + self.planner_settings.guided_samples
        if asked > 1:
            with contextlib.suppress(PlannerError):
                plans += await self.planner.samples(domain, query, timeout_s=self.settings.plan_deadline_s)
        timings["plan_ms"] = (time.perf_counter() - start) * 1000
        if not plans:
            self.metrics.fused.labels("failed").inc()
            return reason
        engine, retriever = self.engine_of(domain), self.self_query(domain)

        def run() -> tuple[list[Any], Any, SelfQueryPlan | None]:
            results = engine.execute_many([p.program for p in plans], k)
            try:
                parsed = retriever.plan(query)  # reads the vocabulary from the store on first use
            except ProReError as exc:  # the retriever's store failed: the programs still answer
                return results, exc, None
            return results, retriever.search([parsed], k)[0], parsed

        t = time.perf_counter()
        try:
            results, partner, parsed = await self._on_engine(domain, run, self.settings.execute_deadline_s,
                                                             "fused_engine")  # fmt: skip
        except TimeoutError:
            results, partner, parsed = [], [], None
            reason = FallbackOut(reason="program_timeout",
                                 detail=f"the programs did not finish within {self.settings.execute_deadline_s:g} s")  # fmt: skip
        timings["engine_ms"] = (time.perf_counter() - t) * 1000
        ran = [i for i, r in enumerate(results) if isinstance(r, ExecutionResult)]
        if not ran:
            first = next((r for r in results if isinstance(r, ProReError)), None)
            if first is not None:
                reason = FallbackOut(reason=f"program_{first.code}", detail=" ".join(first.message.split()))
            self.metrics.fused.labels("failed").inc()
            return reason
        partner_ids = [doc for doc, _ in partner] if isinstance(partner, list) else None
        rankings = [r.ids if isinstance(r, ExecutionResult) else None for r in results]
        shown: ExecutionResult = results[ran[0]]
        alone = self.settings.fuse_gate == "unanimous" and len(results) == asked and unanimous(rankings)
        # a familiar request here ranked nothing alone, or failed (a passing store fault may let it rank now)
        familiar = near and bool(rankings[0])
        if alone or familiar:
            result = results[0] if familiar else shown
        else:
            fused = fuse([*rankings, partner_ids], [1.0] * len(results) + [float(asked)], k)
            result = dataclasses.replace(
                shown, ids=tuple(d for d, _ in fused), scores=tuple(v for _, v in fused)
            )
        self.metrics.fused.labels("answered").inc()
        fusion = FusionOut(programs=asked, ran=len(ran), partner=self.settings.fuse, weight=float(asked),
                           filter=parsed.filter if parsed else None, semantic_query=parsed.query if parsed else "",
                           partner_ids=partner_ids or [], unanimous=alone, familiarity=similarity,
                           familiar=familiar)  # fmt: skip
        return plans[0 if familiar else ran[0]], result, fusion

    async def familiar_answer(
        self, domain: str, plan: Plan, k: int, similarity: float, timings: dict[str, float], start: float
    ) -> tuple[Plan, ExecutionResult, FusionOut] | None:
        """A familiar request's program run alone: its plan, result and fusion record when it ranks
        something, else None (the request is then fused, its program run again among the samples)."""
        timings["plan_ms"] = (time.perf_counter() - start) * 1000
        engine, t = self.engine_of(domain), time.perf_counter()
        try:
            result = await self._on_engine(domain, lambda: engine.execute_many([plan.program], k)[0],
                                           self.settings.execute_deadline_s, "fused_engine")  # fmt: skip
        except TimeoutError:
            result = None
        timings["engine_ms"] = (time.perf_counter() - t) * 1000
        if not isinstance(result, ExecutionResult) or not result.ids:
            return None
        self.metrics.fused.labels("answered").inc()
        # the retriever did not run, so it weighed nothing
        fusion = FusionOut(programs=1, ran=1, partner=self.settings.fuse, weight=0.0, filter=None, semantic_query="",
                           partner_ids=[], familiarity=similarity, familiar=True)  # fmt: skip
        return plan, result, fusion

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
            return await self.answer(
                request_id, body.domain, program, body.k, fields, timings, source="program"
            )
        except DslError as exc:
            raise Refused(422, exc.code, exc.message) from None
        except TimeoutError:
            raise Refused(
                504,
                "execute_timeout",
                f"the program did not finish within {self.settings.execute_deadline_s:g} s",
            ) from None
        except ProReError as exc:
            status = 503 if exc.retryable else 422
            raise Refused(
                status, exc.code, exc.message, self.settings.retry_after_s if exc.retryable else None
            ) from None

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
