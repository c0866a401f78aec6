"""Several stored runs side by side: one markdown table and one figure, the shape of the paper's main table.

Rows are methods; columns are the overall metrics (Hit@1 with its 95% CI), then Hit@1 per level
and per modality group. The comparison is stored in ``<workspace>/reports/compare/<name>/``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexing.publish import staged
from indexing.workspace import Workspace, atomic_write_json, atomic_write_text
from rl.eval.errors import EvalError
from rl.eval.metrics import METRICS
from rl.eval.plots import Bar, grouped_bars, metric_label
from rl.eval.report import SUMMARY, cell, eval_root, latest_runs, load_summary, markdown_table, run_stamp
from rl.eval.runner import LEVELS, MODALITY_GROUPS

TABLE = "compare.md"
JSON = "compare.json"
FIGURE = "compare.png"


@dataclass(frozen=True)
class Comparison:
    """A stored comparison: its directory and its markdown table."""

    path: Path
    table: str
    runs: tuple[str, ...]


def resolve_run(ws: Workspace, ref: str) -> Path:
    """A run directory from a path (absolute, relative, or under the eval reports).

    A method directory resolves to its latest run.
    """
    for candidate in (Path(ref), eval_root(ws) / ref):
        if (candidate / SUMMARY).is_file():
            return candidate
        if candidate.is_dir():
            runs = sorted(p for p in candidate.iterdir() if (p / SUMMARY).is_file() and not p.name.startswith("."))
            if runs:
                return runs[-1]
    raise EvalError(f"no evaluation run at {ref!r}; run 'prore eval <domain> --method M' first", code="no_run")


def _mean(group: Mapping[str, Any] | None, metric: str) -> str:
    if group is None:
        return "–"
    value = group["metrics"][metric]["mean"]
    return "–" if value is None or math.isnan(value) else f"{value:.3f}"


def comparison_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table of ``summaries``, one row per run."""
    mods = [m for m in MODALITY_GROUPS if any(m in s["by_modality"] for s in summaries)]
    headers = [
        "method",
        "domain/split",
        "n",
        "Hit@1 [95% CI]",
        *(metric_label(m) for m in METRICS if m != "hit@1"),
        *(f"Hit@1 {lv}" for lv in LEVELS),
        *(f"Hit@1 {m}" for m in mods),
    ]
    rows = []
    for s in summaries:
        name = s["method"] + (" (gold)" if s.get("uses_gold") else "")
        overall = s["overall"]
        rows.append(
            [
                name,
                f"{s['domain']}/{s['split']}",
                str(overall["n"]),
                cell(overall["metrics"]["hit@1"]),
                *(_mean(overall, m) for m in METRICS if m != "hit@1"),
                *(_mean(s["by_level"].get(lv), "hit@1") for lv in LEVELS),
                *(_mean(s["by_modality"].get(m), "hit@1") for m in mods),
            ]
        )
    return markdown_table(headers, rows)


def _nan_bar() -> Bar:
    nan = float("nan")
    return (nan, nan, nan)


def _figure(path: Path, summaries: Sequence[Mapping[str, Any]], title: str) -> None:
    groups = ["overall", *LEVELS]
    series: dict[str, list[Bar]] = {}
    for s in summaries:
        bars: list[Bar] = []
        for g in groups:
            grp = s["overall"] if g == "overall" else s["by_level"].get(g)
            if grp is None:
                bars.append(_nan_bar())
                continue
            m = grp["metrics"]["hit@1"]
            bars.append((m["mean"], m["low"], m["high"]))
        label = s["method"] if len({x["domain"] for x in summaries}) == 1 else f"{s['method']} ({s['domain']})"
        series[label] = bars
    grouped_bars(path, title=title, groups=groups, series=series, ylabel="Hit@1 (95% CI)")


def compare(
    ws: Workspace,
    refs: Sequence[str] = (),
    *,
    domain: str | None = None,
    split: str = "test",
) -> Comparison:
    """Compare the runs named by ``refs``, or the latest run of every method for ``domain``/``split``."""
    if refs:
        run_dirs = [resolve_run(ws, r) for r in refs]
    else:
        if domain is None:
            raise EvalError("name the runs to compare, or pass --domain to compare the latest run of each method")
        run_dirs = latest_runs(ws, domain, split)
        if not run_dirs:
            raise EvalError(
                f"no stored {domain}/{split} runs; run 'prore eval {domain} --method M --split {split}' first",
                code="no_run",
            )
    summaries = [load_summary(p) for p in run_dirs]
    domains = sorted({s["domain"] for s in summaries})
    splits = sorted({s["split"] for s in summaries})
    label = f"{'+'.join(domains)}-{'+'.join(splits)}"
    table = comparison_table(summaries)
    parent = ws.reports_dir / "compare"
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / f"{label}-{run_stamp()}"
    with staged(final) as tmp:
        atomic_write_text(tmp / TABLE, f"# Comparison: {label}\n\n{table}\n")
        atomic_write_json(tmp / JSON, {"runs": [str(p) for p in run_dirs], "summaries": summaries})
        _figure(tmp / FIGURE, summaries, f"Hit@1 by level · {label}")
    return Comparison(path=final, table=table, runs=tuple(str(p) for p in run_dirs))
