"""Count the rows that pass each of many conditions, in one scan of the corpus table per batch.

The statement is built as a sqlglot tree, never pasted together from text::

    SELECT countIf(<cond_0>) AS n0, countIf(<cond_1>) AS n1, ... FROM <physical table> AS <corpus table>

and runs under the engine's read-only execution limits, like every program query. Conditions come
from validated programs (for instance the WHERE of a structure-only super-query, see
:func:`serving.dsl.strip_retrievals`), written over the corpus table's name as the programs are; a
subquery inside a condition names its physical table as substitution renders it.

A batch that fails because of a condition in it is split in halves down to single conditions, so a
failing condition fails alone with its typed error; whose fault a failure is, is decided as in
:mod:`serving.engine.sqlrun` (:func:`~serving.engine.sqlrun.blame`, and for an unclassified error the
store's answer to :func:`~serving.engine.sqlrun.probe_statement`). A failure that is no condition's fault
(a table that vanished, a server gone) fails the whole call with a retryable
:class:`~indexing.errors.StoreFailure` (or :class:`~indexing.errors.StoreUnavailable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from indexing.errors import StoreFailure, StoreUnavailable
from serving.engine.results import ExecutionError, ExecutionLimits
from serving.engine.sqlrun import TUNING, Blame, blame, execution_error, probe_statement, store_failure

if TYPE_CHECKING:
    from serving.engine.engine import Engine

COUNT_BATCH = 128
"""Conditions counted in one scan; each adds one aggregate to the statement."""

CountOutcome = int | ExecutionError
QueryFn = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]


def count_statement(conditions: Sequence[exp.Expr], table: str, alias: str) -> exp.Select:
    """``SELECT countIf(c0) AS n0, ... FROM table AS alias`` as a tree; the conditions are copied.

    >>> import sqlglot
    >>> cond = sqlglot.parse_one("brand = 'Levi''s'", read="clickhouse")
    >>> count_statement([cond, exp.true()], "prore.products__v0001", "products").sql(dialect="clickhouse")
    "SELECT countIf(brand = 'Levi''s') AS n0, countIf(TRUE) AS n1 FROM prore.products__v0001 AS products"
    """
    source = exp.alias_(exp.to_table(table, dialect="clickhouse"), alias, table=True)
    columns = [exp.alias_(exp.CountIf(this=c.copy()), f"n{j}") for j, c in enumerate(conditions)]
    return exp.select(*columns).from_(source)


class RowCounter:
    """Counts rows of ``table`` (read as ``alias``) through ``query(sql, settings)`` under ``limits``."""

    def __init__(
        self, query: QueryFn, table: str, alias: str, limits: ExecutionLimits, *, batch: int = COUNT_BATCH
    ) -> None:
        self._query = query
        self._table = table
        self._alias = alias
        self._limits = limits
        self._batch = max(batch, 1)
        self.calls = 0
        """Store queries made so far."""
        self._probed = False
        self._probe_error: Exception | None = None

    def count_many(self, conditions: Sequence[exp.Expr]) -> list[CountOutcome]:
        """Rows passing each condition, or its typed error; in input order."""
        out: list[CountOutcome | None] = [None] * len(conditions)
        self._probed, self._probe_error = False, None
        for start in range(0, len(conditions), self._batch):
            self._run(conditions, list(range(start, min(start + self._batch, len(conditions)))), out)
        return [o if o is not None else ExecutionError("the condition was not counted") for o in out]

    def _run(self, conditions: Sequence[exp.Expr], idxs: list[int], out: list[CountOutcome | None]) -> None:
        try:
            counts = self._count([conditions[i] for i in idxs])
        except Exception as exc:  # someone in this batch fails: isolate them, the others keep their counts
            self._raise_unless_condition(exc)
            if len(idxs) == 1:
                out[idxs[0]] = execution_error(exc)
                return
            half = len(idxs) // 2
            self._run(conditions, idxs[:half], out)
            self._run(conditions, idxs[half:], out)
            return
        for i, n in zip(idxs, counts, strict=True):
            out[i] = n

    def _raise_unless_condition(self, exc: Exception) -> None:
        """Raise the call's retryable failure unless ``exc`` may be a condition's fault (as the engine's runner)."""
        who = blame(exc)
        if who is Blame.STATEMENT:
            return
        if who is Blame.UNKNOWN:
            if not self._probed:  # once per call: does the store answer a statement known to be good?
                self._probed = True
                self.calls += 1
                try:
                    self._query(
                        probe_statement(self._table, self._alias), {**TUNING, **self._limits.settings()}
                    )
                except Exception as failed:
                    self._probe_error = failed
            if self._probe_error is None:
                return
            if isinstance(self._probe_error, StoreUnavailable):
                raise self._probe_error from exc
        raise store_failure(exc) from exc

    def _count(self, chunk: Sequence[exp.Expr]) -> list[int]:
        sql = count_statement(chunk, self._table, self._alias).sql(dialect="clickhouse")
        self.calls += 1
        rows = self._query(sql, {**TUNING, **self._limits.settings(len(chunk))})
        if len(rows) != 1 or len(rows[0]) != len(chunk):
            raise StoreFailure(f"count scan returned {len(rows)} rows for {len(chunk)} conditions")
        return [int(v) for v in rows[0]]


def count_many(
    engine: Engine, conditions: Sequence[exp.Expr], *, batch: int = COUNT_BATCH
) -> list[CountOutcome]:
    """Rows of ``engine``'s corpus table passing each condition (see :class:`RowCounter`); the scan
    runs on the engine's index under the engine's execution limits."""
    handle = engine.handle

    def query(sql: str, settings: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = handle.sql.query(sql, settings=settings)
        return rows

    return RowCounter(query, handle.table, engine.schema.table, engine.limits, batch=batch).count_many(
        conditions
    )
