"""The execution engine: validate a program, retrieve its candidate sets, run its SQL, rank.

One engine serves production queries and training rewards, so both behave the same. An engine is
bound to one published index version (immutable), which is what makes its caches safe.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlglot import exp

from core.cache import LRU
from core.errors import ProReError
from indexing.config import Config
from indexing.index import IndexHandle, open_index
from indexing.stores.base import Hit
from indexing.stores.clickhouse import column_type
from serving.dsl import (
    DEFAULT_LIMITS,
    DslError,
    DslLimits,
    Program,
    validate,
)
from serving.dsl.substitute import parameterize_tree, render, substitute_tree
from serving.engine.adaptive import rows_needed, widen
from serving.engine.conditional import branch_chains, condition, conditional_plan, taper_chain, widen_head
from serving.engine.plan import flatten_self_subqueries, pin_clock, stable_order
from serving.engine.prepared import BatchOutcome, EngineStats, Prepared, Rejection, program_key
from serving.engine.pushdown import pushdown_filters
from serving.engine.ranking import rank_results
from serving.engine.rerank import Reranker
from serving.engine.results import STAGES, DeadlineExceeded, ExecutionLimits, ExecutionResult
from serving.engine.retrieval import RetrievalRequest, Retriever
from serving.engine.sqlrun import Outcome, Params, SqlJob, SqlRunner
from serving.settings import CacheSizes, PlanningOptions, ServingSettings, SqlSettings


class Engine:
    """Executes retrieval programs against one index (see DESIGN.md sections 3 and 6).

    **Concurrency.** Calls from several threads may overlap; no lock is held across a whole call.
    What they share is safe to share: the caches are :class:`core.cache.LRU` (each locked; two
    calls missing the same entry may both compute it, and get the same value, since the index version
    never changes), the counters of :meth:`stats` take a small lock, and prepared programs and rendered
    jobs are never changed once cached (batch statements are built from copies of their trees). What
    cannot overlap is serialized where it lives, for the length of one store or model call: chDB runs
    one query at a time per process (its query lock), each BM25 index searches under its own lock, and
    each embedder name embeds under one process-wide lock (:func:`serving.engine.retrieval.embed_lock`),
    because sentence-transformers' fast tokenizer fails ("Already borrowed") when two threads use the
    shared model at once. So one call's vector search or validation runs while another's SQL does.
    A service that wants throughput still batches through :meth:`execute_many`: a batch makes one
    embedder call and one search per field for all its programs.

    **Deadlines.** ``execute`` and ``execute_many`` take a ``deadline`` (a :func:`time.monotonic`
    time) or ``timeout_s``. Programs not finished when it passes yield a retryable
    :class:`~serving.engine.results.DeadlineExceeded`; the time left caps each SQL statement's
    ``max_execution_time``. Validation, embedding and searches are not interrupted: the deadline is
    checked after each stage and before each SQL statement.
    """

    def __init__(
        self,
        handle: IndexHandle,
        *,
        reranker: Reranker | None = None,
        limits: ExecutionLimits | None = None,
        caches: CacheSizes | None = None,
        dsl_limits: DslLimits | None = None,
        sql_settings: SqlSettings | None = None,
        planning: PlanningOptions | None = None,
    ) -> None:
        self.handle = handle
        self.planning = planning or PlanningOptions()
        """The planning passes (filter pushdown, bounded adaptive K, conditional evaluation of conjunctions)
        and their settings: ``serving.planning``'s defaults unless given."""
        self.sql_settings = sql_settings or SqlSettings()
        """How id sets reach ClickHouse: bound query parameters or SQL literals (same results)."""
        self.dsl_limits = dsl_limits or DEFAULT_LIMITS
        """What every program is validated against (ladders, caps); the language's defaults unless given."""
        self.schema = handle.schema
        self.reference_time = handle.reference_time
        """What ``now()`` / ``today()`` mean to every program this engine runs (:func:`~serving.engine.plan.pin_clock`)."""
        self.limits = limits or ExecutionLimits.from_config(handle.cfg.clickhouse)
        sizes = caches or CacheSizes()
        self.retriever = Retriever(
            handle,
            reranker=reranker,
            sizes=sizes,
            exact_ties=self.planning.exact_ties,
            in_process=self.planning.candidates_in_process,
            search_threads=sizes.search_threads,
        )
        self.sql = SqlRunner(self._query, handle.table, handle.schema.table, self.limits)
        self._prepared: LRU[str, Prepared | Rejection] = LRU(sizes.programs)
        self._sql_results: LRU[tuple[str, Params], tuple[str, ...]] = LRU(sizes.programs)
        # Literal ids: a job per (program, id sets). Bound ids: a template per program (id sets None).
        self._jobs: LRU[tuple[str, tuple[tuple[str, ...], ...] | None], SqlJob] = LRU(sizes.programs)
        self._stats_lock = threading.Lock()
        self._programs = 0
        self._results = 0
        self._batches = 0
        self._failed_batches = 0
        self._errors: Counter[str] = Counter()
        self._stage_ms: dict[str, float] = dict.fromkeys(STAGES, 0.0)

    @classmethod
    def open(
        cls,
        cfg: Config,
        domain: str,
        *,
        version: str | None = None,
        reranker: Reranker | None = None,
        limits: ExecutionLimits | None = None,
        caches: CacheSizes | None = None,
        dsl_limits: DslLimits | None = None,
        sql_settings: SqlSettings | None = None,
        planning: PlanningOptions | None = None,
    ) -> Engine:
        """An engine on the published index of ``domain`` (or ``version``) in ``cfg``'s workspace.

        Its execution limits are ``cfg.clickhouse``'s unless ``limits`` are given; its cache sizes and DSL limits are the config's
        ``serving`` section (:class:`~serving.settings.ServingSettings`: ``engine``, ``dsl`` and ``sql``)
        unless ``caches``, ``dsl_limits`` or ``sql_settings`` are given; its planning passes are
        ``serving.planning`` unless ``planning`` is given.
        """
        settings = cfg.section(ServingSettings)
        return cls(
            open_index(cfg, domain, version),
            reranker=reranker,
            limits=limits,
            caches=caches or settings.engine,
            dsl_limits=dsl_limits or settings.dsl,
            sql_settings=sql_settings or settings.sql,
            planning=planning or settings.planning,
        )

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the search threads and release the index handle's store connections."""
        self.retriever.close()
        close = getattr(self.handle, "close", None)
        if callable(close):
            close()

    def clear_caches(self, *, retrieval: bool = True) -> None:
        """Forget cached programs, rendered SQL and SQL results, and unless ``retrieval`` is false also
        query vectors, searches and candidate lists (a cold start)."""
        if retrieval:
            self.retriever.clear()
        for cache in (self._prepared, self._sql_results, self._jobs):
            cache.clear()

    def cache_stats(self) -> dict[str, dict[str, int]]:
        """``size``, ``maxsize``, ``hits`` and ``misses`` of every cache, by name (``programs``, ``sql``,
        ``jobs``, ``searches``, ``requests``, ``embeddings:<embedder>``)."""
        stats = self.retriever.cache_stats()
        for name, cache in (("programs", self._prepared), ("sql", self._sql_results), ("jobs", self._jobs)):
            stats[name] = _counts(cache)
        return stats

    def stats(self) -> EngineStats:
        """Counters of an open engine since it opened (the caches' counts since :meth:`clear_caches`)."""
        caches = self.retriever.caches()
        for name, cache in (("programs", self._prepared), ("sql", self._sql_results), ("jobs", self._jobs)):
            caches[name] = cache.stats()
        with self._stats_lock:
            return EngineStats(
                programs=self._programs,
                results=self._results,
                errors=dict(self._errors),
                batches=self._batches,
                failed_batches=self._failed_batches,
                sql_calls=self.sql.calls,
                store_calls=dict(self.retriever.calls),
                caches=caches,
                stage_ms=dict(self._stage_ms),
            )

    # -- public entry points ------------------------------------------------------------------

    def execute(
        self, program: Program, k: int = 20, *, deadline: float | None = None, timeout_s: float | None = None
    ) -> ExecutionResult:
        """Run one program and return its ranked result; a bad program raises its typed error.

        ``program`` is typed: text from a model or a request is read with
        :func:`serving.dsl.parse_program` or :func:`serving.dsl.extract_program` first, and its
        :class:`~serving.dsl.FormatError` is the caller's to report. Past ``deadline`` (or
        ``timeout_s``) it raises :class:`~serving.engine.results.DeadlineExceeded`.
        """
        outcome = self._execute([program], k, _deadline(deadline, timeout_s))[0]
        if isinstance(outcome, ProReError):
            raise outcome
        return outcome

    def execute_many(
        self,
        programs: Sequence[Program],
        k: int = 20,
        *,
        deadline: float | None = None,
        timeout_s: float | None = None,
    ) -> list[BatchOutcome]:
        """Run a batch (the reward's entry point); each program's result or typed error, in input order.

        Identical retrieval requests across the batch are made once, each embedder and each field's
        vector search is called once for the whole batch, and the SQL runs in as few ClickHouse calls
        as correctness allows. A failing program fails alone. ``deadline`` is a :func:`time.monotonic`
        time (``timeout_s`` a number of seconds from now; with both, the earlier): programs unfinished
        when it passes yield :class:`~serving.engine.results.DeadlineExceeded`, the others keep their
        outcome. A failure that is no program's fault raises (a retryable store error) for the call.
        """
        return self._execute(list(programs), k, _deadline(deadline, timeout_s))

    # -- pipeline -----------------------------------------------------------------------------

    def prepare(self, program: Program) -> Prepared:
        """Validate and plan (cached by the program's canonical JSON); raises the program's DslError."""
        outcome = self._prepared_or_error(program)
        if isinstance(outcome, DslError):
            raise outcome
        return outcome

    def _prepared_or_error(self, program: Program) -> Prepared | DslError:
        """The program's :class:`Prepared`, or a fresh (never raised) error built from its cached rejection."""
        key = program_key(program)
        cached = self._prepared.get(key)
        if cached is None:
            try:
                cached = self._prepare(program)
            except DslError as exc:
                cached = Rejection.of(exc)
            self._prepared.put(key, cached)
        return cached.error() if isinstance(cached, Rejection) else cached

    def _prepare(self, program: Program) -> Prepared:
        validated = validate(program, self.schema, self.dsl_limits)
        requests = tuple(
            RetrievalRequest(e.field, e.mode, e.query, e.k, e.rerank) for e in program.retrieval_list
        )
        pinned = pin_clock(validated.tree, self.reference_time)
        tree = flatten_self_subqueries(stable_order(pinned), validated.table, self.schema.nullable_fields)
        if self.planning.pushdown:
            filters = pushdown_filters(tree, self.schema)
            requests = tuple(dataclasses.replace(r, filter=filters.get(i)) for i, r in enumerate(requests))
        chain, tail = (
            conditional_plan(tree, validated.table, requests, disjuncts=self.planning.conditional_disjuncts)
            if self.planning.conditional
            else ((), ())
        )
        branches: tuple[tuple[int, ...], ...] = ()
        if self.planning.branches_at(self.handle.rows) and not chain:
            branches = branch_chains(tree, validated.table, requests)
        for links in (chain,) if chain else branches:
            head = requests[links[0]]
            requests = widen_head(requests, links[0], self.planning.head_width(head.k, self.handle.rows))
            if self.planning.chain_taper:
                requests = taper_chain(requests, links)
        return Prepared(validated, dataclasses.replace(validated, tree=tree), requests, chain, tail, branches)

    def _execute(self, program_list: Sequence[Program], k: int, deadline: float | None) -> list[BatchOutcome]:
        for program in program_list:
            program_key(program)  # a caller's bug fails the whole call, before any work
        try:
            out, stage_ms = self._pipeline(program_list, k, deadline)
        except BaseException:
            with self._stats_lock:
                self._batches += 1
                self._failed_batches += 1
            raise
        with self._stats_lock:
            self._batches += 1
            self._programs += len(out)
            for o in out:
                if isinstance(o, ProReError):
                    self._errors[o.code] += 1
                else:
                    self._results += 1
            for stage, ms in stage_ms.items():
                self._stage_ms[stage] += ms
        return out

    def _pipeline(
        self, program_list: Sequence[Program], k: int, deadline: float | None
    ) -> tuple[list[BatchOutcome], dict[str, float]]:
        """Each program's outcome, and the call's own time per stage (ms)."""
        t0 = time.perf_counter()
        batch_ms = dict.fromkeys(STAGES, 0.0)
        own: list[dict[str, float]] = [dict.fromkeys(STAGES, 0.0) for _ in program_list]
        outcomes: list[BatchOutcome | None] = [None] * len(program_list)
        prepared: dict[int, Prepared] = {}
        for i, program in enumerate(program_list):
            start = time.perf_counter()
            outcome = self._prepared_or_error(program)
            own[i]["validate"] = (time.perf_counter() - start) * 1000
            if isinstance(outcome, DslError):
                outcomes[i] = outcome
            else:
                prepared[i] = outcome
        t1 = time.perf_counter()
        batch_ms["validate"] = (t1 - t0) * 1000
        _late(prepared, outcomes, deadline)

        hits: dict[RetrievalRequest, tuple[Hit, ...]] = {}
        base = {i: p.requests for i, p in prepared.items()}
        used = self._retrieve(prepared, base, hits, own, batch_ms)
        _late(prepared, outcomes, deadline)

        t2 = time.perf_counter()
        jobs: dict[int, SqlJob] = {}
        for i, p in prepared.items():
            start = time.perf_counter()
            try:
                jobs[i] = self._job(p, hits, used[i])
            except ProReError as exc:
                outcomes[i] = exc
            own[i]["sql"] += (time.perf_counter() - start) * 1000
        order = list(jobs)
        sql_ms = [0.0] * len(order)
        rows: list[Outcome | ProReError] = list(self._run_sql([jobs[i] for i in order], deadline, sql_ms))
        for i, ms in zip(order, sql_ms, strict=True):
            own[i]["sql"] += ms
        t3 = time.perf_counter()
        batch_ms["sql"] = (t3 - t2) * 1000
        if self.planning.adaptive_k:
            rows = self._widen(prepared, order, rows, base, used, hits, jobs, own, k, deadline, batch_ms)
            t3 = time.perf_counter()

        for i, result_rows in zip(order, rows, strict=True):
            if isinstance(result_rows, ProReError):
                outcomes[i] = result_rows
                continue
            start = time.perf_counter()
            p = prepared[i]
            lists = [hits[r] for r in used[i]]
            ranked = rank_results(
                result_rows,
                [[doc for doc, _ in lists[e]] for e in p.positive],
                sql_ordered=p.ordered,
                k=k,
            )
            candidates = {
                name: tuple(doc for doc, _ in lst) for name, lst in zip(p.names, lists, strict=True)
            }
            own[i]["rank"] = (time.perf_counter() - start) * 1000
            own[i]["total"] = sum(ms for stage, ms in own[i].items() if stage != "total")
            outcomes[i] = ExecutionResult(ranked.ids, ranked.scores, candidates, jobs[i].sql, own[i])
        t4 = time.perf_counter()
        batch_ms["rank"] = (t4 - t3) * 1000
        batch_ms["total"] = (t4 - t0) * 1000
        out: list[BatchOutcome] = []
        for o in outcomes:
            assert o is not None
            out.append(o)
        return out, batch_ms

    def _retrieve(
        self,
        prepared: Mapping[int, Prepared],
        base: Mapping[int, tuple[RetrievalRequest, ...]],
        hits: dict[RetrievalRequest, tuple[Hit, ...]],
        own: list[dict[str, float]],
        batch_ms: dict[str, float],
    ) -> dict[int, tuple[RetrievalRequest, ...]]:
        """Resolve into ``hits`` the lists of the programs of ``base`` (their requests by entry) and return
        the requests those lists come from: ``base``, except that each entry of a program's conditional
        chain after the first is searched among the ids of the entry before it, and each entry of its tail
        among the ids of the chain's last entry (:mod:`serving.engine.conditional`). One retriever call per
        link of the longest chain (its tail one more), each for the whole batch."""
        used = {i: list(reqs) for i, reqs in base.items()}
        # each program's rounds after the first: (entry, the entry whose list it is searched among)
        rounds = {i: _rounds(prepared[i].chain, prepared[i].tail, prepared[i].branches) for i in base}
        later = {i: {e for r in rs for e, _ in r} for i, rs in rounds.items()}
        todo = {i: [r for e, r in enumerate(reqs) if e not in later[i]] for i, reqs in base.items()}
        n = 0
        while todo:
            self._resolve(todo, hits, own, batch_ms)
            todo = {}
            for i in base:
                if n < len(rounds[i]):
                    for entry, among in rounds[i][n]:
                        used[i][entry] = condition(base[i][entry], base[i][among], hits[used[i][among]])
                    todo[i] = [used[i][entry] for entry, _ in rounds[i][n]]
            n += 1
        return {i: tuple(reqs) for i, reqs in used.items()}

    def _resolve(
        self,
        requests: Mapping[int, Sequence[RetrievalRequest]],
        hits: dict[RetrievalRequest, tuple[Hit, ...]],
        own: list[dict[str, float]],
        batch_ms: dict[str, float],
    ) -> None:
        """One retriever call for the ``requests`` of each program, into ``hits``: a request's share of each
        stage goes to the programs that hold it, split evenly."""
        costs: dict[RetrievalRequest, dict[str, float]] = {}
        hits.update(self.retriever.resolve((r for reqs in requests.values() for r in reqs), batch_ms, costs))
        holders: dict[RetrievalRequest, list[int]] = {}
        for i, reqs in requests.items():
            for req in dict.fromkeys(reqs):
                holders.setdefault(req, []).append(i)
        for req, share in costs.items():
            for i in holders.get(req, ()):
                for stage, ms in share.items():
                    own[i][stage] += ms / len(holders[req])

    def _widen(
        self,
        prepared: Mapping[int, Prepared],
        order: Sequence[int],
        rows: Sequence[Outcome | ProReError],
        base: dict[int, tuple[RetrievalRequest, ...]],
        used: dict[int, tuple[RetrievalRequest, ...]],
        hits: dict[RetrievalRequest, tuple[Hit, ...]],
        jobs: dict[int, SqlJob],
        own: list[dict[str, float]],
        k: int,
        deadline: float | None,
        batch_ms: dict[str, float],
    ) -> list[Outcome | ProReError]:
        """Bounded adaptive K (:mod:`serving.engine.adaptive`): rounds that widen the positive entries of
        the programs with fewer rows than needed (a conditional chain is searched again from its first
        entry at the new widths) and run their SQL again; updates ``base``, ``used``, ``hits`` and ``jobs``
        and returns every program's rows (in ``order``)."""
        out: list[Outcome | ProReError] = list(rows)
        at = {i: n for n, i in enumerate(order)}
        ladder, top = self.dsl_limits.k_ladder, self.planning.adaptive_k_max
        while deadline is None or time.monotonic() < deadline:
            wider: dict[int, tuple[RetrievalRequest, ...]] = {}
            for i in order:
                got = out[at[i]]
                if isinstance(got, ProReError) or len(got) >= rows_needed(prepared[i].plan.tree, k):
                    continue
                nxt = widen(base[i], prepared[i].positive, ladder, top)
                if nxt is not None:
                    wider[i] = nxt
            if not wider:
                break
            base.update(wider)
            used.update(self._retrieve(prepared, wider, hits, own, batch_ms))
            start = time.perf_counter()
            redo: list[int] = []
            for i in wider:
                try:
                    jobs[i] = self._job(prepared[i], hits, used[i])
                except ProReError as exc:
                    out[at[i]] = exc
                    continue
                redo.append(i)
            sql_ms = [0.0] * len(redo)
            again = self._run_sql([jobs[i] for i in redo], deadline, sql_ms)
            for i, got, ms in zip(redo, again, sql_ms, strict=True):
                out[at[i]] = got
                own[i]["sql"] += ms
            batch_ms["sql"] += (time.perf_counter() - start) * 1000
        return out

    def _job(
        self,
        p: Prepared,
        hits: Mapping[RetrievalRequest, tuple[Hit, ...]],
        requests: Sequence[RetrievalRequest] | None = None,
    ) -> SqlJob:
        """The SQL job of ``p`` with the id sets of ``requests`` (its own unless adaptive K widened them or
        its conditional chain searched them among other candidates)."""
        reqs = p.requests if requests is None else requests
        id_sets = tuple(tuple(doc for doc, _ in hits[r]) for r in reqs)
        # Substitution is a pure function of the program's tree (and, for literals, the id sets): render
        # it once. Bound ids leave the statement the same for every id set: one template per program.
        bound = self.sql_settings.ids == "bound"
        key = (p.validated.normalized_sql, None if bound else id_sets)
        job = self._jobs.get(key)
        if job is None:
            job = self._render(p, None if bound else id_sets)
            self._jobs.put(key, job)
        return job.bind(id_sets)

    def _render(self, p: Prepared, id_sets: tuple[tuple[str, ...], ...] | None) -> SqlJob:
        """The program's job with ``id_sets`` as literals, or its template (query parameters) for None."""
        slots: tuple[tuple[str, int], ...] = ()
        if id_sets is None:
            id_type = column_type(self.schema.field("id"))
            tree, slots = parameterize_tree(p.plan, table=self.handle.table, id_type=id_type)
        else:
            tree = substitute_tree(p.plan, dict(enumerate(id_sets)), table=self.handle.table)
        where = tree.args.get("where") if p.plain else None
        # A plain filter's statement is SELECT [DISTINCT] id FROM <table> AS <corpus> WHERE <cond>; a scan
        # batches its condition subtree (ids are the table's key, so DISTINCT changes nothing).
        return SqlJob(render(tree), tree, where.this if isinstance(where, exp.Where) else None, slots=slots)

    def _run_sql(self, jobs: Sequence[SqlJob], deadline: float | None, costs: list[float]) -> list[Outcome]:
        """Each job's rows (SQL results cached by text and bound ids; identical statements run once, their time
        split among the jobs that share them, a cached one costing nothing), adding ms into ``costs``."""
        out: list[Outcome | None] = [None] * len(jobs)
        todo: dict[tuple[str, Params], list[int]] = {}
        for i, job in enumerate(jobs):
            cached = self._sql_results.get(job.key)
            if cached is not None:
                out[i] = cached
            else:
                todo.setdefault(job.key, []).append(i)
        distinct = [jobs[idxs[0]] for idxs in todo.values()]
        # A batch of one runs the program's own SQL, so execute() and execute_many() agree exactly.
        distinct_ms = [0.0] * len(distinct)
        results = self.sql.run(distinct, deadline=deadline, costs=distinct_ms)
        for idxs, res, ms in zip(todo.values(), results, distinct_ms, strict=True):
            if not isinstance(res, ProReError):
                self._sql_results.put(jobs[idxs[0]].key, res)
            for i in idxs:
                out[i] = res
                costs[i] += ms / len(idxs)
        return [o if o is not None else () for o in out]

    def _query(
        self, sql: str, settings: dict[str, Any], params: Mapping[str, Any] | None
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.handle.sql.query(sql, settings=settings, params=params)
        return rows


def _deadline(deadline: float | None, timeout_s: float | None) -> float | None:
    """The earlier of an absolute monotonic ``deadline`` and ``timeout_s`` from now."""
    if timeout_s is None:
        return deadline
    relative = time.monotonic() + timeout_s
    return relative if deadline is None else min(deadline, relative)


def _late(prepared: dict[int, Prepared], outcomes: list[BatchOutcome | None], deadline: float | None) -> None:
    """Past the deadline, every program still running gets its DeadlineExceeded and stops here."""
    if deadline is None or time.monotonic() < deadline:
        return
    for i in list(prepared):
        outcomes[i] = DeadlineExceeded("the request's deadline passed before the program finished")
        del prepared[i]


def _counts(cache: LRU[Any, Any]) -> dict[str, int]:
    return {"size": len(cache), "maxsize": cache.maxsize, "hits": cache.hits, "misses": cache.misses}


def _rounds(
    chain: tuple[int, ...], tail: tuple[int, ...], branches: tuple[tuple[int, ...], ...] = ()
) -> list[list[tuple[int, int]]]:
    """The retrieval rounds after the first of a conditional plan: each chained entry among the one before,
    then the whole tail among the chain's last entry; the chains within disjuncts side by side, link by link.

    >>> _rounds((0, 2), (1, 3)), _rounds((), ()), _rounds((), (), ((0, 1, 4), (2, 3)))
    ([[(2, 0)], [(1, 2), (3, 2)]], [], [[(1, 0), (3, 2)], [(4, 1)]])
    """
    out = [[(chain[n], chain[n - 1])] for n in range(1, len(chain))]
    if chain and tail:
        out.append([(t, chain[-1]) for t in tail])
    for links in branches:
        for n in range(1, len(links)):
            if len(out) < n:
                out.append([])
            out[n - 1].append((links[n], links[n - 1]))
    return out
