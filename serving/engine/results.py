"""What the engine returns and the limits it runs programs under."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from indexing.errors import ProReError
from indexing.stores.clickhouse import QueryLimits
from serving.dsl.program import Program, Retrieval

STAGES: tuple[str, ...] = ("validate", "embed", "ann", "sparse", "rerank", "sql", "rank", "total")
"""Stages reported in :attr:`ExecutionResult.timings`, in pipeline order."""


class ExecutionError(ProReError):
    """A valid program failed while running: a limit was hit or ClickHouse rejected it.

    Codes: ``exec_timeout`` (``max_execution_time``), ``exec_limit`` (rows read, result rows or
    memory) and ``exec_failed`` (anything else ClickHouse refused because of the statement, e.g. a
    type mismatch). A failure that is not the program's raises a retryable
    :class:`~indexing.errors.StoreFailure` for the whole call instead.
    """

    code = "exec_failed"


ExecutionLimits = QueryLimits
"""Limits every program's SQL runs under: the stores' :class:`~indexing.stores.clickhouse.QueryLimits`,
whose defaults are :class:`~indexing.config.ClickHouseConfig`'s (one definition of the read-only caps)."""


def candidate_name(index: int, entry: Retrieval) -> str:
    """The key of entry ``index``'s (0-based) list in :attr:`ExecutionResult.candidates`: its placeholder,
    :meth:`~serving.dsl.Program.placeholder`, without the angle brackets (``text_1`` for ``<text_1>``)."""
    return Program.placeholder(index, entry)[1:-1]


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one program.

    ``ids`` are ranked by the ranking contract (:mod:`serving.engine.ranking`), at most ``k``;
    ``scores`` are their contract scores. ``candidates`` maps each placeholder name (``text_1``,
    ``image_2``) to the ranked ids its entry retrieved. ``sql`` is the SQL that ran, with the id sets
    substituted. ``timings`` gives milliseconds per stage (:data:`STAGES`); for a program run inside
    :meth:`Engine.execute_many` each stage is the batch's time divided by the batch size.
    Only a program that validated and ran within its limits has a result; a failing one yields its
    typed error instead.
    """

    ids: tuple[str, ...]
    scores: tuple[float, ...]
    candidates: Mapping[str, tuple[str, ...]]
    sql: str
    timings: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "ids": list(self.ids),
            "scores": list(self.scores),
            "candidates": {name: list(ids) for name, ids in self.candidates.items()},
            "sql": self.sql,
            "timings": {stage: round(ms, 3) for stage, ms in self.timings.items()},
        }
