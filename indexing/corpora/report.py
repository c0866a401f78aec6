"""The load report of a corpus: what a person checking a load wants to see, written with the corpus.

``report.json`` lies beside ``manifest.json`` and is written with it (in the same staged directory), for
generated and loaded corpora alike:

- ``rows``; per column, ``empty`` (string columns: how many values are ``""``) and ``range`` (date,
  time and number columns: the least and the greatest value);
- for a loaded corpus, the loader's counts (:meth:`~indexing.corpora.loading.LoadStats.as_report`):
  records ``read``, ``loaded``, ``dropped`` and ``deduplicated`` by reason, and ``derived`` notes;
- ``extras``: the columns kept beside the parts in ``extras.parquet`` (one row per document, by ``id``),
  which the schema lacks and nothing indexes, or ``null``.

``prore corpus show`` prints it (:func:`report_lines`).
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from indexing.schema import CorpusSchema, DType

REPORT = "report.json"
EXTRAS = "extras.parquet"
_ORDERED = (DType.INT, DType.FLOAT, DType.DATE, DType.DATETIME)


def _plain(value: Any) -> Any:
    return (
        value.isoformat(sep=" ")
        if isinstance(value, datetime)
        else str(value)
        if isinstance(value, date)
        else value
    )


class Profile:
    """Empty values and ranges per column, accumulated over the tables of a corpus as they are written."""

    def __init__(self, schema: CorpusSchema) -> None:
        self._strings = [f.name for f in schema.fields if f.dtype is DType.STRING]
        self._ordered = [f.name for f in schema.fields if f.dtype in _ORDERED]
        self._empty = dict.fromkeys(self._strings, 0)
        self._range: dict[str, list[Any]] = {}
        self.rows = 0

    def update(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name in self._strings:
            self._empty[name] += int(pc.sum(pc.equal(pc.utf8_length(table.column(name)), 0)).as_py() or 0)
        for name in self._ordered:
            low, high = (v.as_py() for v in pc.min_max(table.column(name)).values())
            if low is None:  # every value null
                continue
            old = self._range.get(name)
            self._range[name] = [min(old[0], low), max(old[1], high)] if old else [low, high]

    def as_report(self) -> dict[str, Any]:
        columns: dict[str, dict[str, Any]] = {name: {"empty": n} for name, n in self._empty.items()}
        for name, (lo, hi) in self._range.items():
            columns[name] = {"range": [_plain(lo), _plain(hi)]}
        return {"rows": self.rows, "columns": columns}


def read_report(corpus_dir: Path) -> dict[str, Any] | None:
    """The load report in ``corpus_dir``, or ``None`` for a corpus written before reports were."""
    path = corpus_dir / REPORT
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _reasons(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{k}: {v:,}' for k, v in counts.items())})" if counts else ""


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as ``prore corpus show`` prints it: counts, ranges, empty shares, extra columns.

    >>> report_lines({"rows": 4, "read": 6, "loaded": 4, "dropped": {"placeholder_date": 1},
    ...     "deduplicated": {"duplicate_message": 1}, "derived": {}, "extras": ["to"],
    ...     "columns": {"id": {"empty": 0}, "body": {"empty": 1}, "date": {"range": ["2001-01-02", "2001-05-14"]}}})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['load: read 6, loaded 4, dropped 1 (placeholder_date: 1), deduplicated 1 (duplicate_message: 1)',
     'range: date 2001-01-02 .. 2001-05-14',
     'empty: body 25.0% (1)',
     'extra columns (extras.parquet, not indexed): to']
    """
    lines = []
    rows = int(report.get("rows", 0))
    if "read" in report:
        dropped, dedup = report.get("dropped", {}), report.get("deduplicated", {})
        lines.append(
            f"load: read {report['read']:,}, loaded {report['loaded']:,}, dropped {sum(dropped.values()):,}"
            f"{_reasons(dropped)}, deduplicated {sum(dedup.values()):,}{_reasons(dedup)}"
        )
        if report.get("derived"):
            lines.append(f"derived: {', '.join(f'{k}: {v:,}' for k, v in report['derived'].items())}")
    columns: dict[str, dict[str, Any]] = report.get("columns", {})
    ranges = [f"{name} {c['range'][0]} .. {c['range'][1]}" for name, c in columns.items() if "range" in c]
    if ranges:
        lines.append(f"range: {'; '.join(ranges)}")
    empty = [(name, c["empty"]) for name, c in columns.items() if c.get("empty")]
    lines.append(
        "empty: "
        + (", ".join(f"{name} {100 * n / max(rows, 1):.1f}% ({n:,})" for name, n in empty) or "none")
    )
    if report.get("extras"):
        lines.append(f"extra columns ({EXTRAS}, not indexed): {', '.join(report['extras'])}")
    return lines
