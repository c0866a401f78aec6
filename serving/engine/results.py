"""What the engine returns and the limits it runs programs under."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from indexing.config import ClickHouseConfig
from indexing.errors import ProReError

STAGES: tuple[str, ...] = ("validate", "embed", "ann", "sparse", "rerank", "sql", "rank", "total")
"""Stages reported in :attr:`ExecutionResult.timings`, in pipeline order."""


class ExecutionError(ProReError):
    """A valid program failed while running: a limit was hit or ClickHouse rejected it.

    Codes: ``exec_timeout`` (``max_execution_time``), ``exec_limit`` (rows read, result rows or
    memory) and ``exec_failed`` (anything else ClickHouse refused, e.g. a type mismatch).
    """

    code = "exec_failed"


@dataclass(frozen=True)
class ExecutionLimits:
    """Limits every program's SQL runs under; defaults come from :class:`ClickHouseConfig`."""

    max_execution_time_s: float = ClickHouseConfig.max_execution_time_s
    """Wall-clock limit per query (ClickHouse ``max_execution_time``)."""
    max_rows_to_read: int = ClickHouseConfig.max_rows_to_read
    """Rows scanned per query (``max_rows_to_read``)."""
    max_result_rows: int = ClickHouseConfig.max_result_rows
    """Rows a program may return (``max_result_rows``)."""
    max_memory_usage: int = ClickHouseConfig.max_memory_usage
    """Memory per query in bytes (``max_memory_usage``)."""

    @classmethod
    def from_config(cls, ch: ClickHouseConfig) -> ExecutionLimits:
        return cls(
            max_execution_time_s=ch.max_execution_time_s,
            max_rows_to_read=ch.max_rows_to_read,
            max_result_rows=ch.max_result_rows,
            max_memory_usage=ch.max_memory_usage,
        )

    def settings(self, programs: int = 1) -> dict[str, Any]:
        """ClickHouse query settings for a query that runs ``programs`` programs at once.

        A batched query gets the same caps as one program: it reads, keeps and spends at least what
        each of its programs would alone, so a batch within the caps means every program is. A batch
        that hits a cap is split until each program runs alone, under exactly these settings.
        """
        return {
            "readonly": 1,
            "max_execution_time": self.max_execution_time_s,
            "max_rows_to_read": self.max_rows_to_read,
            # A union returns one row per program; each program's own row cap is checked on its own.
            "max_result_rows": max(self.max_result_rows, programs),
            "max_memory_usage": self.max_memory_usage,
        }


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one program.

    ``ids`` are ranked by the ranking contract (:mod:`serving.engine.ranking`), at most ``k``;
    ``scores`` are their contract scores. ``candidates`` maps each placeholder name (``text_1``,
    ``image_2``) to the ranked ids its entry retrieved. ``sql`` is the SQL that ran, with the id sets
    substituted. ``timings`` gives milliseconds per stage (:data:`STAGES`); for a program run inside
    :meth:`Engine.execute_many` each stage is the batch's time divided by the batch size.
    ``ok`` is true when the program validated, every placeholder resolved and the SQL ran within
    its limits; a failing program yields a typed error instead of a result.
    """

    ids: tuple[str, ...]
    scores: tuple[float, ...]
    candidates: Mapping[str, tuple[str, ...]]
    sql: str
    timings: Mapping[str, float] = field(default_factory=dict)
    ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "ok": self.ok,
            "ids": list(self.ids),
            "scores": list(self.scores),
            "candidates": {name: list(ids) for name, ids in self.candidates.items()},
            "sql": self.sql,
            "timings": {stage: round(ms, 3) for stage, ms in self.timings.items()},
        }
