"""Run the substituted SQL of many programs in as few ClickHouse calls as correctness allows.

Two batched shapes, both returning each program's ids in the program's own row order, both built as
sqlglot trees from the programs' substituted trees and rendered once (never pasted from SQL text):

* a *filter scan* for programs that are a plain ``SELECT [DISTINCT] id FROM <table> WHERE <cond>``:
  one pass over the table, ``SELECT groupArrayIf(id, <cond_0>), groupArrayIf(id, <cond_1>), ...``;
  ids are the table's key, so ``DISTINCT`` changes nothing;
* a *union* for every other program (``ORDER BY``, ``LIMIT``, ...):
  ``SELECT 0, groupArray(id) FROM (<sql_0>) UNION ALL SELECT 1, ...``; ``groupArray`` over a
  subquery keeps the subquery's ``ORDER BY`` order.

**Id sets.** A job carries its ids either as string literals in its SQL (``id IN ('P1', 'P2')``) or as
query parameters beside it (``id IN {text_1: Array(String)}`` with ``text_1`` bound to the ids), as
:class:`~serving.settings.SqlSettings` chooses. A batch renames each job's parameters to names unique in
the batch, one per distinct id set (:func:`bind_apart`), so programs never see each other's ids and an id
set that many programs share is sent once.

**Whose fault.** A batch statement that fails is split in halves and retried, down to single programs,
which run their own SQL exactly as :meth:`Engine.execute` would; so a failing program fails alone, with
the same error it gets when run by itself, and never takes its neighbours with it. :func:`blame` reads
the error first:

* the statement's (:class:`~indexing.errors.QueryRejected`, a write refused as read-only): split;
* the store's (:class:`~indexing.errors.StoreUnavailable`, a code of
  :data:`~indexing.stores.clickhouse_faults.STORE_FAULTS` such as a vanished table, the server's total
  memory): the whole call fails at once with a retryable error, never split, so that a reward never
  scores an infrastructure failure as the programs' failure;
* anyone's (an unclassified ClickHouse code, an error of ours while building or reading a batch): the
  runner runs a statement it knows to be good (:func:`probe_statement`, once per call). If the store
  answers it, the failure was the batch's, and it is split like a statement fault; a single program that
  still fails that way alone gets an ``exec_failed`` of its own. If the store fails that too, the whole
  call fails.

So what a program's text can break, however ClickHouse words it, stays that program's failure.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from core.errors import ProReError
from indexing.errors import QueryRejected, StoreError, StoreFailure, StoreUnavailable
from indexing.stores.clickhouse_faults import LIMIT_FAULTS
from serving.engine.results import DeadlineExceeded, ExecutionError, ExecutionLimits

TUNING: dict[str, Any] = {"compile_expressions": 0}
"""Settings added to every program query. ClickHouse JIT-compiles an expression after it ran a few
times; batched conditions are long and rarely repeat, so compiling them costs far more than it saves."""

SMALLEST_BATCH = 4
"""Below this size a failing batch runs program by program instead of halving again."""

_TIMEOUT = 159  # TIMEOUT_EXCEEDED: the program's max_execution_time


_DIALECT = "clickhouse"


Params = tuple[tuple[str, tuple[str, ...]], ...]
"""Query parameters of a job: ``(name, ids)`` pairs, each bound as ``{name: Array(String)}``."""


@dataclass(frozen=True)
class SqlJob:
    """One program's substituted statement: ``tree``, its rendering ``sql`` (what runs alone), and
    ``where``, the condition subtree of ``tree`` when the program is a plain filter (scan-batchable).

    With bound ids, ``sql`` names query parameters and ``params`` holds the ids bound to each; a
    *template* (``params`` empty, ``slots`` naming the entry behind each parameter) is what the engine
    caches per program, and :meth:`bind` makes a program's job of it for given id sets. With literal
    ids, ``sql`` holds them and ``params`` is empty.

    A job may be cached and shared by concurrent batches: its trees are never changed, the batch
    statements are built from copies.
    """

    sql: str
    tree: exp.Select = field(compare=False, repr=False)
    where: exp.Expr | None = field(default=None, compare=False, repr=False)
    params: Params = ()
    """The ids bound to each query parameter of ``sql``; empty when the ids are literals in it."""
    slots: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)
    """A template's parameters: ``(name, entry)``, the entry (0-based) whose ids each one binds."""

    @property
    def key(self) -> tuple[str, Params]:
        """What decides the job's rows: its SQL and its bound ids (the SQL results cache's key)."""
        return self.sql, self.params

    def bind(self, id_sets: Sequence[Sequence[str]]) -> SqlJob:
        """This template's job for ``id_sets`` (entry ``i``'s ids at ``id_sets[i]``): its parameters bound."""
        if not self.slots:
            return self
        return dataclasses.replace(self, params=tuple((name, tuple(id_sets[e])) for name, e in self.slots))

    def bound(self) -> dict[str, list[str]] | None:
        """The parameters as the stores take them (``params=``), or None without any."""
        return {name: list(ids) for name, ids in self.params} if self.params else None


def bind_apart(
    trees: Sequence[exp.Expr], jobs: Sequence[SqlJob]
) -> tuple[list[exp.Expr], dict[str, list[str]]]:
    """Copies of ``trees`` (``trees[i]`` from ``jobs[i]``) whose query parameters are renamed apart for one
    batch statement, and the batch's parameters: one name (``b0``, ``b1``, ...) per distinct id set.

    >>> import sqlglot
    >>> job = SqlJob("", exp.select("id"), params=(("text_1", ("P1",)), ("text_2", ("P2",))))
    >>> cond = sqlglot.parse_one("id IN {text_1: Array(String)} AND id IN {text_2: Array(String)}", read="clickhouse")
    >>> other = SqlJob("", exp.select("id"), params=(("text_1", ("P2",)),))
    >>> trees, params = bind_apart([cond, sqlglot.parse_one("id IN {text_1: Array(String)}", read="clickhouse")], [job, other])
    >>> [t.sql(dialect="clickhouse") for t in trees], params
    (['id IN {b0: Array(String)} AND id IN {b1: Array(String)}', 'id IN {b1: Array(String)}'], {'b0': ['P1'], 'b1': ['P2']})
    """
    names: dict[tuple[str, ...], str] = {}
    out: list[exp.Expr] = []
    for tree, job in zip(trees, jobs, strict=True):
        own = dict(job.params)
        copy = tree.copy()
        for node in list(copy.find_all(exp.Placeholder)):
            ids = own.get(node.name)
            if ids is None:
                raise StoreFailure(
                    f"a program's SQL names the parameter {node.name!r} but binds no ids to it"
                )
            node.set("this", exp.var(names.setdefault(ids, f"b{len(names)}")))
        out.append(copy)
    return out, {name: list(ids) for ids, name in names.items()}


def scan_statement(
    conditions: Sequence[exp.Expr], table: str, alias: str, *, copy: bool = True
) -> exp.Select:
    """``SELECT groupArrayIf(id, (c0)) AS c0, ... FROM table AS alias`` as a tree; the conditions are copied
    unless ``copy`` is false (they are the caller's own copies).

    Every column is named by its position: ClickHouse would name it by its expression, and two programs
    whose conditions differ only in spacing or parentheses then give two columns of one name, which
    Arrow cannot read back.

    >>> cond = exp.EQ(this=exp.column("brand"), expression=exp.Literal.string("x') OR (1"))
    >>> scan_statement([cond, exp.true()], "prore.products__v0001", "products").sql(dialect="clickhouse")
    "SELECT groupArrayIf(id, (brand = 'x'') OR (1')) AS c0, groupArrayIf(id, (TRUE)) AS c1 FROM prore.products__v0001 AS products"
    """
    source = exp.alias_(exp.to_table(table, dialect=_DIALECT), alias, table=True)
    columns = [
        exp.alias_(
            exp.Anonymous(
                this="groupArrayIf", expressions=[exp.column("id"), exp.Paren(this=c.copy() if copy else c)]
            ),
            f"c{i}",
        )
        for i, c in enumerate(conditions)
    ]
    return exp.select(*columns, copy=False).from_(source, copy=False)


def union_statement(statements: Sequence[exp.Expr], *, copy: bool = True) -> exp.Select | exp.Union:
    """``SELECT 0 AS p, groupArray(id) FROM (<s0>) UNION ALL SELECT 1 AS p, ...`` as a tree; the
    statements are copied unless ``copy`` is false.

    >>> union_statement([exp.select("id").from_("t").limit(2)]).sql(dialect="clickhouse")
    'SELECT 0 AS p, groupArray(id) FROM (SELECT id FROM t LIMIT 2)'
    """
    parts = [
        exp.select(
            exp.alias_(exp.Literal.number(i), "p"),
            exp.Anonymous(this="groupArray", expressions=[exp.column("id")]),
            copy=False,
        ).from_(exp.Subquery(this=s.copy() if copy else s), copy=False)
        for i, s in enumerate(statements)
    ]
    out: exp.Select | exp.Union = parts[0]
    for part in parts[1:]:
        out = exp.Union(this=out, expression=part, distinct=False)
    return out


Outcome = tuple[str, ...] | ExecutionError | DeadlineExceeded
QueryFn = Callable[[str, dict[str, Any], Mapping[str, Any] | None], list[tuple[Any, ...]]]
"""``query(sql, settings, params)``: a store's read-only query with ``params`` bound to ``{name: Type}``."""
Statement = tuple[str, Mapping[str, Any] | None]


class Blame(enum.Enum):
    """Whose fault a failed statement is, as far as its error tells (:func:`blame`)."""

    STATEMENT = "statement"
    STORE = "store"
    UNKNOWN = "unknown"


def blame(exc: BaseException) -> Blame:
    """Whose fault ``exc`` is: the statement's, the store's, or unknown until the store answers a good statement.

    >>> blame(QueryRejected("x", number=20)), blame(StoreUnavailable("gone"))
    (<Blame.STATEMENT: 'statement'>, <Blame.STORE: 'store'>)
    >>> blame(StoreFailure("x", number=49, unclassified=True)), blame(ValueError("a bug reading a batch"))
    (<Blame.UNKNOWN: 'unknown'>, <Blame.UNKNOWN: 'unknown'>)
    """
    if isinstance(exc, QueryRejected) or (isinstance(exc, StoreError) and exc.code == "sql_readonly"):
        return Blame.STATEMENT  # what it says, or a write the store's own check or readonly refused
    if isinstance(exc, StoreFailure):
        return Blame.UNKNOWN if exc.unclassified else Blame.STORE
    if isinstance(exc, ProReError):
        return Blame.STORE  # StoreUnavailable, a chDB path held elsewhere, ...
    return Blame.UNKNOWN


def probe_statement(table: str, alias: str) -> str:
    """A statement known to be good, which tells a healthy store from a failing one: one id of the table.

    >>> probe_statement("prore.products__v0001", "products")
    'SELECT id FROM prore.products__v0001 AS products LIMIT 1'
    """
    source = exp.alias_(exp.to_table(table, dialect=_DIALECT), alias, table=True)
    return _render(exp.select("id").from_(source, copy=False).limit(1, copy=False))


def execution_error(exc: BaseException) -> ExecutionError:
    """The program's typed, one-line error for a statement that failed because of what it says.

    ``exec_timeout`` for ``max_execution_time``, ``exec_limit`` for the other caps, ``exec_failed`` for
    the rest of :data:`~indexing.stores.clickhouse_faults.STATEMENT_FAULTS` (types, parsing, unknown
    names, ...) and for any other failure the store showed to be the statement's (:func:`blame`).
    """
    number = exc.number if isinstance(exc, QueryRejected) else None
    if number == _TIMEOUT:
        code = "exec_timeout"
    elif number in LIMIT_FAULTS:
        code = "exec_limit"
    else:
        code = "exec_failed"
    text = " ".join((str(exc) if isinstance(exc, ProReError) else f"{type(exc).__name__}: {exc}").split())
    # ClickHouse repeats "Code: N. DB::Exception:" prefixes; keep the sentence that says what happened.
    core = re.sub(r"^ClickHouse(?: failed \([^)]*\))?: ", "", text)
    core = re.sub(r"(Code: \d+\. )?DB::Exception: ", "", core)
    core = re.sub(r"\s*\(version [^)]*\)", "", core).strip()
    if len(core) > 300:
        core = core[:297] + "..."
    return ExecutionError(f"the program's SQL failed: {core or type(exc).__name__}", code=code)


def store_failure(exc: Exception) -> StoreFailure | StoreUnavailable:
    """What fails the whole call when running a program's SQL failed for a reason that is not the program's."""
    if isinstance(exc, StoreFailure | StoreUnavailable):
        return exc
    detail = exc.one_line() if isinstance(exc, ProReError) else f"{type(exc).__name__}: {exc}"
    return StoreFailure(
        f"running the programs' SQL failed, not because of a program: {' '.join(detail.split())[:400]}"
    )


class SqlRunner:
    """Runs jobs through ``query(sql, settings, params)`` under ``limits``; safe to call from several threads
    (each call keeps its own state; the store serializes its queries itself).

    A filter scan reads ``table`` (physical, ``[db.]name``) as ``alias`` (the corpus table's name), as
    substitution renders a program's FROM.
    """

    def __init__(
        self, query: QueryFn, table: str, alias: str, limits: ExecutionLimits, *, max_batch: int = 256
    ) -> None:
        self._query = query
        self._table = table
        self._alias = alias
        self._limits = limits
        self._max_batch = max(max_batch, 1)
        self._calls = 0
        self._calls_lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Store queries made so far."""
        with self._calls_lock:
            return self._calls

    def run(
        self, jobs: Sequence[SqlJob], *, deadline: float | None = None, costs: list[float] | None = None
    ) -> list[Outcome]:
        """Each job's ids in row order, or its typed error; in input order.

        ``deadline`` (a :func:`time.monotonic` time) caps each statement's ``max_execution_time`` by the
        time left; a job not run by then, or stopped by that cap, gets a :class:`DeadlineExceeded`.
        With ``costs`` (one entry per job), each job is charged its share (ms) of every store call that
        carried it: a call's time split equally among its jobs, failed attempts included.
        """
        call = _Call(deadline, costs if costs is not None else [0.0] * len(jobs))
        out: list[Outcome | None] = [None] * len(jobs)
        scans = [i for i, j in enumerate(jobs) if j.where is not None]
        unions = [i for i, j in enumerate(jobs) if j.where is None]
        for group, scan in ((scans, True), (unions, False)):
            for start in range(0, len(group), self._max_batch):
                self._run_chunk(jobs, group[start : start + self._max_batch], scan, out, call)
        return [o if o is not None else ExecutionError("the program was not run") for o in out]

    def run_one(self, job: SqlJob, *, deadline: float | None = None) -> Outcome:
        """Run the job's own SQL alone (the path of a single program)."""
        return self._one(job, 0, _Call(deadline, [0.0]))

    # -- batching -----------------------------------------------------------------------------

    def _one(self, job: SqlJob, index: int, call: _Call) -> Outcome:
        try:
            rows = self._call(lambda: (job.sql, job.bound()), [index], call)
        except _Late as late:
            return late.error()
        except Exception as exc:
            # The statement's own fault, or one a good statement does not share: this program's failure
            # alone. The store's: the whole call fails, retryably.
            self._raise_unless_statement(exc, call)
            return execution_error(exc)
        return tuple(str(r[0]) for r in rows)

    def _raise_unless_statement(self, exc: Exception, call: _Call) -> None:
        """Raise the call's retryable failure unless ``exc`` may be the statement's fault (:func:`blame`);
        an unknown fault is the statement's when the store answers :func:`probe_statement`."""
        who = blame(exc)
        if who is Blame.STATEMENT:
            return
        if who is Blame.UNKNOWN:
            failed = self._probe(call)
            if failed is None:
                return
            if isinstance(failed, StoreUnavailable):
                raise failed from exc
        raise store_failure(exc) from exc

    def _probe(self, call: _Call) -> Exception | None:
        """Run :func:`probe_statement` once per call: None when the store answered it, else its error."""
        if call.probed:
            return call.probe_error
        try:
            self._call(lambda: (probe_statement(self._table, self._alias), None), (), call)
        except _Late:
            return None  # no verdict; every statement left in this call is late too
        except Exception as exc:
            call.probe_error = exc
        call.probed = True
        return call.probe_error

    def _call(
        self, statement: Callable[[], Statement], idxs: Sequence[int], call: _Call
    ) -> list[tuple[Any, ...]]:
        """Render and run one statement carrying jobs ``idxs``, under the limits and the time left."""
        settings = {**TUNING, **self._limits.settings(len(idxs))}
        capped = False
        if call.deadline is not None:
            left = call.deadline - time.monotonic()
            if left <= 0:
                raise _Late(len(idxs))
            if left < settings["max_execution_time"]:
                # chDB and ClickHouse take fractional seconds; the key keeps its place before readonly.
                settings["max_execution_time"] = round(max(left, 0.001), 3)
                capped = True
        start = time.perf_counter()
        try:
            sql, params = statement()
            with self._calls_lock:
                self._calls += 1
            return self._query(sql, settings, params)
        except QueryRejected as exc:
            if capped and exc.number == _TIMEOUT:
                raise _Late(len(idxs)) from exc  # stopped by the deadline, not by the program's own cap
            raise
        finally:
            share = (time.perf_counter() - start) * 1000 / max(len(idxs), 1)
            for i in idxs:
                call.costs[i] += share

    def _run_chunk(
        self,
        jobs: Sequence[SqlJob],
        idxs: Sequence[int],
        scan: bool,
        out: list[Outcome | None],
        call: _Call,
    ) -> None:
        if not idxs:
            return
        if len(idxs) == 1:
            out[idxs[0]] = self._one(jobs[idxs[0]], idxs[0], call)
            return
        chunk = [jobs[i] for i in idxs]
        try:
            lists = self._parse(scan, chunk, idxs, call)
        except _Late as late:
            for i in idxs:
                out[i] = late.error()
            return
        except Exception as exc:
            # Someone in this chunk fails, unless the store does; isolate them so the others still get
            # their results.
            self._raise_unless_statement(exc, call)
            if len(idxs) <= SMALLEST_BATCH:
                for i in idxs:
                    out[i] = self._one(jobs[i], i, call)
            else:
                half = len(idxs) // 2
                self._run_chunk(jobs, idxs[:half], scan, out, call)
                self._run_chunk(jobs, idxs[half:], scan, out, call)
            return
        for i, ids in zip(idxs, lists, strict=True):
            # A batch shares its limits; a program that alone would exceed its own cap reruns alone
            # to fail exactly as it does by itself.
            out[i] = self._one(jobs[i], i, call) if len(ids) > self._limits.max_result_rows else ids

    def _parse(
        self, scan: bool, chunk: Sequence[SqlJob], idxs: Sequence[int], call: _Call
    ) -> list[tuple[str, ...]]:
        if scan:
            rows = self._call(lambda: self._scan_sql(chunk), idxs, call)
            if len(rows) != 1 or len(rows[0]) != len(chunk):
                raise StoreFailure(f"filter scan returned {len(rows)} rows for {len(chunk)} programs")
            return [tuple(str(x) for x in arr) for arr in rows[0]]
        rows = self._call(lambda: self._union_sql(chunk), idxs, call)
        by_index: dict[int, tuple[str, ...]] = {int(r[0]): tuple(str(x) for x in r[1]) for r in rows}
        if len(by_index) != len(chunk):
            raise StoreFailure(f"union returned {len(by_index)} of {len(chunk)} programs")
        return [by_index[i] for i in range(len(chunk))]

    def _scan_sql(self, chunk: Sequence[SqlJob]) -> Statement:
        conditions = [job.where for job in chunk if job.where is not None]
        assert len(conditions) == len(chunk), "a filter scan takes plain filters only"
        if not any(job.params for job in chunk):
            return _render(scan_statement(conditions, self._table, self._alias)), None
        renamed, params = bind_apart(conditions, chunk)
        return _render(scan_statement(renamed, self._table, self._alias, copy=False)), params

    @staticmethod
    def _union_sql(chunk: Sequence[SqlJob]) -> Statement:
        if not any(job.params for job in chunk):
            return _render(union_statement([job.tree for job in chunk])), None
        renamed, params = bind_apart([job.tree for job in chunk], chunk)
        return _render(union_statement(renamed, copy=False)), params


@dataclass
class _Call:
    """The state of one :meth:`SqlRunner.run` call: its deadline, each job's charged time (ms), and the
    outcome of its probe of the store (:func:`probe_statement`), run at most once."""

    deadline: float | None
    costs: list[float]
    probed: bool = False
    probe_error: Exception | None = None


class _Late(Exception):
    """The call's deadline passed before, or while, a statement ran."""

    def __init__(self, programs: int) -> None:
        super().__init__("deadline")
        self.programs = programs

    def error(self) -> DeadlineExceeded:
        return DeadlineExceeded("the request's deadline passed before the program's SQL finished")


def _render(tree: exp.Expr) -> str:
    # A batch statement's tree is this call's own (built from copies) and is dropped once rendered, so sqlglot
    # need not copy it first (that copy cost as much as the rendering). sqlglot copies by default because
    # rendering may rewrite a tree (it wraps ``NOT x IN y`` in parentheses), which here changes nothing.
    return tree.sql(dialect=_DIALECT, comments=False, copy=False)
