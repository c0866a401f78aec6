"""Evaluation reports: summaries with bootstrap CIs, stored as a run directory.

A run lives in ``<workspace>/reports/eval/<domain>/<split>/<method>/<stamp>/``::

    summary.json     overall, by level (L1/L2/L3) and by modality, each metric with mean, 95% CI and n:
                     the gold metrics, and the graded ones where the benchmark has relevant sets
                     (``graded`` says whether it does, and why not); ``failures`` counts the queries
                     that failed at each layer (:func:`failure_breakdown`)
    summary.md       the same as a markdown table
    queries.jsonl    one line per query: rank of the gold id, every metric, returned ids, error
    by_level.png     bar chart with error bars by level
    by_modality.png  bar chart with error bars by modality group

The directory is written under a temporary name and renamed into place, so a reader never sees a
half-written run. Stamps sort in time order, so the latest run of a method is the last stamp.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexing.publish import staged
from indexing.workspace import Workspace, atomic_write_json, atomic_write_text
from rl.eval.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_many
from rl.eval.errors import EvalError
from rl.eval.metrics import ALL_METRICS, FOUND_VS_SATISFIED, GRADED, GRADED_NA, METRICS
from rl.eval.outcome import FAILURE_LAYERS
from rl.eval.plots import Bar, grouped_bars, metric_label
from rl.eval.runner import LEVELS, MODALITY_GROUPS, EvalRun, QueryResult

SUMMARY = "summary.json"
TABLE = "summary.md"
QUERIES = "queries.jsonl"
LEVEL_PNG = "by_level.png"
MODALITY_PNG = "by_modality.png"
PLOTTED: tuple[str, ...] = ("hit@1", "hit@3", "mrr", "ndcg@3", "p@1", "p@5", "ndcg@10", "recall@10")
"""Metrics drawn in the charts (the graded ones only where the run has them)."""
FAILURES: tuple[str, ...] = (*FAILURE_LAYERS, "miss", "not-satisfied")
"""Why a query did not count, in the reward's layer order (DESIGN.md section 5): the completion did not
parse as a program, the program failed validation, it did not run, it ran and the gold was not first, it
ran and its first result does not satisfy the request (only where the benchmark has relevant sets)."""


def failure_breakdown(results: Iterable[QueryResult]) -> dict[str, int]:
    """How many queries failed at each of :data:`FAILURES`.

    A failed query counts in its :attr:`~rl.eval.runner.QueryResult.layer` (:mod:`rl.eval.outcome`). ``miss``
    and ``not-satisfied`` count queries that ran: one query can be both.

    >>> ok = QueryResult("q1", "L1", "text", "P1", 2, {"p@1": 0.0}, ("P2",), None)
    >>> bad = QueryResult("q2", "L1", "text", "P1", None, {}, (), "format not_json: no JSON object", "format")
    >>> failure_breakdown([ok, bad])
    {'format': 1, 'validation': 0, 'execution': 0, 'miss': 1, 'not-satisfied': 1}
    """
    counts = dict.fromkeys(FAILURES, 0)
    for r in results:
        if r.error is not None:
            counts[r.layer or "execution"] += 1
            continue
        counts["miss"] += r.rank != 1
        counts["not-satisfied"] += r.scores.get("p@1", 1.0) == 0.0
    return counts


def eval_root(ws: Workspace) -> Path:
    """Where evaluation runs are stored."""
    return ws.reports_dir / "eval"


def has_graded(results: Sequence[QueryResult]) -> bool:
    """Whether every query was scored against a relevant set."""
    return bool(results) and all(all(m in r.scores for m in GRADED) for r in results)


def _group(results: Sequence[QueryResult], resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    names = ALL_METRICS if has_graded(results) else METRICS
    cols = {m: [r.scores[m] for r in results] for m in names}
    ivs = bootstrap_many(cols, n_resamples=resamples, confidence=confidence, seed=seed)
    return {"n": len(results), "metrics": {m: ivs[m].as_dict() for m in names}}


def summarize(
    run: EvalRun,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Any]:
    """The JSON summary of a run: overall, by level and by modality group (empty groups left out)."""
    res = run.results
    by_level = {lv: [r for r in res if r.level == lv] for lv in LEVELS}
    by_mod = {g: [r for r in res if r.modality == g] for g in MODALITY_GROUPS}
    errors = [r for r in res if r.error is not None]
    return {
        "domain": run.domain,
        "split": run.split,
        "method": run.method,
        "uses_gold": run.uses_gold,
        "k": run.k,
        "started_at": run.started_at,
        "elapsed_s": round(run.elapsed_s, 3),
        "queries_per_s": round(len(res) / run.elapsed_s, 2) if run.elapsed_s > 0 else None,
        "bootstrap": {"resamples": resamples, "confidence": confidence, "seed": seed},
        "graded": {"available": True, "reason": None}
        if has_graded(res)
        else {"available": False, "reason": GRADED_NA},
        "overall": _group(res, resamples, confidence, seed),
        "by_level": {lv: _group(rs, resamples, confidence, seed) for lv, rs in by_level.items() if rs},
        "by_modality": {g: _group(rs, resamples, confidence, seed) for g, rs in by_mod.items() if rs},
        "errors": {"count": len(errors), "examples": [{"qid": r.qid, "error": r.error} for r in errors[:5]]},
        "failures": failure_breakdown(res),
        **({"meta": run.meta} if run.meta else {}),
    }


def cell(metric: Mapping[str, Any] | None) -> str:
    """``0.523 [0.491, 0.556]``: a mean with its CI, as in the tables."""
    if metric is None:
        return "n/a"
    mean, low, high = metric["mean"], metric["low"], metric["high"]
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _rows(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    rows: list[tuple[str, Mapping[str, Any]]] = [("overall", summary["overall"])]
    rows += [(lv, g) for lv, g in summary["by_level"].items()]
    rows += [(f"modality: {m}", g) for m, g in summary["by_modality"].items()]
    return rows


def headline(summary: Mapping[str, Any]) -> str:
    """The run's markdown table: one row per group, every metric with its 95% CI."""
    headers = ["group", "n", *(metric_label(m) for m in ALL_METRICS)]
    body = [
        [name, str(g["n"]), *(cell(g["metrics"].get(m)) for m in ALL_METRICS)] for name, g in _rows(summary)
    ]
    return markdown_table(headers, body)


def failures_table(summary: Mapping[str, Any]) -> str:
    """The run's failure breakdown as a one-row markdown table (``n/a`` for not-satisfied without relevant sets)."""
    failures = summary.get("failures") or {}
    graded = (summary.get("graded") or {}).get("available", False)
    row = [str(failures.get(f, 0)) if graded or f != "not-satisfied" else "n/a" for f in FAILURES]
    return markdown_table(["n", *FAILURES], [[str(summary["overall"]["n"]), *row]])


def render_markdown(summary: Mapping[str, Any]) -> str:
    """The full ``summary.md`` text."""
    gold = " (reference: reads the gold program)" if summary.get("uses_gold") else ""
    conf = round(summary["bootstrap"]["confidence"] * 100)
    lines = [
        f"# {summary['method']}{gold} on {summary['domain']} / {summary['split']}",
        "",
        f"{summary['overall']['n']} queries, k={summary['k']}, {summary['elapsed_s']} s; "
        f"cells are mean [{conf}% percentile-bootstrap CI, {summary['bootstrap']['resamples']} resamples].",
        "",
        headline(summary),
        "",
        FOUND_VS_SATISFIED,
    ]
    if summary.get("split") == "human":
        from rl.datasets.human import HUMAN_NOTE

        lines += ["", HUMAN_NOTE]
    graded = summary.get("graded") or {}
    if not graded.get("available", False):
        lines += ["", f"P@1, P@5, nDCG@10 and R@10: {graded.get('reason') or GRADED_NA}"]
    if "failures" in summary:
        lines += ["", "Failures by layer (a query that ran can both miss and not satisfy):", "",
                  failures_table(summary)]  # fmt: skip
    if summary["errors"]["count"]:
        lines += [
            "",
            f"{summary['errors']['count']} queries failed; first: {summary['errors']['examples'][0]}",
        ]
    return "\n".join(lines) + "\n"


def _bars(groups: Mapping[str, Any], metric: str) -> list[Bar]:
    return [
        (g["metrics"][metric]["mean"], g["metrics"][metric]["low"], g["metrics"][metric]["high"])
        for g in groups.values()
    ]


def _plot_groups(path: Path, title: str, groups: Mapping[str, Any]) -> None:
    grouped_bars(
        path,
        title=title,
        groups=[f"{name}\n(n={g['n']})" for name, g in groups.items()],
        series={
            metric_label(m): _bars(groups, m)
            for m in PLOTTED
            if all(m in g["metrics"] for g in groups.values())
        },
    )


def run_stamp() -> str:
    """A UTC time stamp that sorts in time order (microseconds keep quick successive runs apart)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def write_run(
    ws: Workspace,
    run: EvalRun,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Path:
    """Store ``run`` as a complete run directory and return its path."""
    summary = summarize(run, resamples=resamples, confidence=confidence, seed=seed)
    parent = eval_root(ws) / run.domain / run.split / run.method
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / run_stamp()
    with staged(final) as tmp:
        atomic_write_json(tmp / SUMMARY, summary)
        atomic_write_text(tmp / TABLE, render_markdown(summary))
        atomic_write_text(tmp / QUERIES, "".join(json.dumps(r.as_record()) + "\n" for r in run.results))
        where = f"{run.method} · {run.domain}/{run.split}"
        _plot_groups(
            tmp / LEVEL_PNG, f"{where}: by level", {"overall": summary["overall"], **summary["by_level"]}
        )
        _plot_groups(tmp / MODALITY_PNG, f"{where}: by modality", summary["by_modality"])
    return final


def load_summary(run_dir: Path) -> dict[str, Any]:
    """The summary of a stored run, or :class:`EvalError` when ``run_dir`` is not a complete run."""
    path = run_dir / SUMMARY
    if not path.is_file():
        raise EvalError(f"no evaluation run at {run_dir} (missing {SUMMARY})", code="no_run")
    data: dict[str, Any] = json.loads(path.read_text())
    data["run_dir"] = str(run_dir)
    return data


def latest_runs(ws: Workspace, domain: str, split: str) -> list[Path]:
    """The latest stored run of every method for ``domain``/``split``, ordered by method name."""
    base = eval_root(ws) / domain / split
    if not base.is_dir():
        return []
    found = []
    for method_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        stamps = sorted(p for p in method_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        complete = [p for p in stamps if (p / SUMMARY).is_file()]
        if complete:
            found.append(complete[-1])
    return found
