"""Several stored runs side by side: one markdown table and one figure, the shape of the paper's main table.

Rows are methods; columns are the overall gold metrics (Hit@1 with its 95% CI), then Hit@1 per level
and per modality group, then the graded metrics against the relevant sets (P@1 with its CI, P@5,
nDCG@10, R@10, P@1 per level and modality; "n/a" for a benchmark without relevant sets). Below it, every method against a baseline (the first run, or the one named):
the mean paired difference of each metric on the queries both scored, with a paired bootstrap CI; and
for each pool of runs (one recipe's training seeds), their difference pooled, with a CI that resamples
the runs as well as the queries.
Runs over different benchmarks, index versions or query sets are refused, unless asked for, and then
flagged (see :mod:`rl.eval.pairing`). The comparison is stored in ``<workspace>/reports/compare/<name>/``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexing.publish import staged
from indexing.workspace import Workspace, atomic_write_json, atomic_write_text
from rl.eval.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from rl.eval.errors import EvalError
from rl.eval.metrics import FOUND_VS_SATISFIED, GRADED, METRICS
from rl.eval.pairing import PairedResult, describe, load_queries, mismatches, paired, pooled
from rl.eval.plots import Bar, grouped_bars, metric_label
from rl.eval.report import SUMMARY, cell, eval_root, latest_runs, load_summary, markdown_table, run_stamp
from rl.eval.runner import LEVELS, MODALITY_GROUPS

TABLE = "compare.md"
JSON = "compare.json"
FIGURE = "compare.png"
FIGURE_P1 = "compare_p1.png"
"""P@1 by level (written when a run has relevant sets)."""


@dataclass(frozen=True)
class Comparison:
    """A stored comparison: its directory and its markdown table."""

    path: Path
    table: str
    runs: tuple[str, ...]
    paired: tuple[PairedResult, ...] = ()
    """Every run against the baseline, on shared queries."""
    pooled: tuple[PairedResult, ...] = ()
    """Each pool of runs against the baseline (``runs`` > 1)."""
    mismatches: dict[str, list[Any]] = field(default_factory=dict)
    """Where the runs differ (empty unless compared with ``allow_mismatch``)."""


def resolve_run(ws: Workspace, ref: str) -> Path:
    """A run directory from a path (absolute, relative, or under the eval reports).

    A method directory resolves to its latest run.
    """
    for candidate in (Path(ref), eval_root(ws) / ref):
        if (candidate / SUMMARY).is_file():
            return candidate
        if candidate.is_dir():
            runs = sorted(
                p for p in candidate.iterdir() if (p / SUMMARY).is_file() and not p.name.startswith(".")
            )
            if runs:
                return runs[-1]
    raise EvalError(
        f"no evaluation run at {ref!r}; run 'prore eval <domain> --method M' first", code="no_run"
    )


def _mean(group: Mapping[str, Any] | None, metric: str) -> str:
    if group is None:
        return "–"
    if metric not in group["metrics"]:
        return "n/a"  # no relevant sets (a benchmark on real data): not 0
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
        "P@1 [95% CI]",
        *(metric_label(m) for m in GRADED if m != "p@1"),
        *(f"P@1 {lv}" for lv in LEVELS),
        *(f"P@1 {m}" for m in mods),
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
                cell(overall["metrics"].get("p@1")),
                *(_mean(overall, m) for m in GRADED if m != "p@1"),
                *(_mean(s["by_level"].get(lv), "p@1") for lv in LEVELS),
                *(_mean(s["by_modality"].get(m), "p@1") for m in mods),
            ]
        )
    return markdown_table(headers, rows)


PAIRED_GRADED: tuple[str, ...] = ("p@1", "ndcg@10")
"""The graded metrics the paired table shows, where the runs were scored on relevant sets (all of
:data:`rl.eval.metrics.GRADED` are paired and kept in ``compare.json``)."""


def _delta(iv: Any) -> str:
    return f"{iv.mean:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"


def paired_table(results: Sequence[PairedResult], confidence: float = DEFAULT_CONFIDENCE) -> str:
    """The markdown table of paired differences, one row per run against the baseline."""
    conf = round(confidence * 100)
    graded = [m for m in PAIRED_GRADED if any(m in r.metrics for r in results)]
    headers = [
        "method",
        "vs",
        "paired n",
        *(f"Δ{metric_label(m)} [{conf}% CI]" for m in (*METRICS, *graded)),
        "Hit@1 wins/losses",
    ]
    rows = [
        [r.method + (f" ({r.runs} runs)" if r.runs > 1 else ""), r.baseline, str(r.n),
         *(_delta(r.metrics[m]) for m in METRICS), *(_delta(r.metrics[m]) if m in r.metrics else "n/a" for m in graded),
         f"{r.wins}/{r.losses}"]
        for r in results
    ]  # fmt: skip
    return markdown_table(headers, rows)


def _names(summaries: Sequence[Mapping[str, Any]], run_dirs: Sequence[Path]) -> list[str]:
    names = [s["method"] + (" (gold)" if s.get("uses_gold") else "") for s in summaries]
    return [f"{n} ({d.name})" if names.count(n) > 1 else n for n, d in zip(names, run_dirs, strict=True)]


def _nan_bar() -> Bar:
    nan = float("nan")
    return (nan, nan, nan)


def _figure(path: Path, summaries: Sequence[Mapping[str, Any]], title: str, metric: str = "hit@1") -> None:
    groups = ["overall", *LEVELS]
    series: dict[str, list[Bar]] = {}
    for s in summaries:
        bars: list[Bar] = []
        for g in groups:
            grp = s["overall"] if g == "overall" else s["by_level"].get(g)
            if grp is None or metric not in grp["metrics"]:
                bars.append(_nan_bar())
                continue
            m = grp["metrics"][metric]
            bars.append((m["mean"], m["low"], m["high"]))
        label = (
            s["method"] if len({x["domain"] for x in summaries}) == 1 else f"{s['method']} ({s['domain']})"
        )
        series[label] = bars
    grouped_bars(path, title=title, groups=groups, series=series, ylabel=f"{metric_label(metric)} (95% CI)")


def compare(
    ws: Workspace,
    refs: Sequence[str] = (),
    *,
    domain: str | None = None,
    split: str = "test",
    allow_mismatch: bool = False,
    baseline: str | None = None,
    pools: Mapping[str, Sequence[str]] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Comparison:
    """Compare the runs named by ``refs``, or the latest run of every method for ``domain``/``split``.

    Runs that differ in benchmark, index version, query set, gold answers or ``k`` raise
    :class:`EvalError` (``run_mismatch``) unless ``allow_mismatch``; then the table says so. Paired
    differences are against the run of method ``baseline`` (default: the first run). ``pools`` maps a
    label to the methods of several runs of one recipe (``{"dapo": ["planner:dapo-s0", "planner:dapo-s1"]}``),
    each pooled against the baseline (:func:`rl.eval.pairing.pooled`).
    """
    if refs:
        run_dirs = [resolve_run(ws, r) for r in refs]
    else:
        if domain is None:
            raise EvalError(
                "name the runs to compare, or pass --domain to compare the latest run of each method"
            )
        run_dirs = latest_runs(ws, domain, split)
        if not run_dirs:
            raise EvalError(
                f"no stored {domain}/{split} runs; run 'prore eval {domain} --method M --split {split}' first",
                code="no_run",
            )
    summaries = [load_summary(p) for p in run_dirs]
    queries = [load_queries(p) for p in run_dirs]
    found = mismatches(summaries, queries)
    if found and not allow_mismatch:
        raise EvalError(
            f"these runs are not comparable: they differ in {describe(found)}; compare runs of one benchmark, "
            "index and query set, or pass --allow-mismatch to show them flagged (paired differences then "
            "use the queries they share)",
            code="run_mismatch",
        )
    names = _names(summaries, run_dirs)
    methods = [s["method"] for s in summaries]
    base = 0
    if baseline is not None:
        if baseline not in methods:
            raise EvalError(
                f"no run of method {baseline!r} to compare against; runs: {', '.join(methods)}", code="no_run"
            )
        base = methods.index(baseline)
    pairs = paired(names, queries, baseline=base, resamples=resamples, confidence=confidence, seed=seed)
    pooled_pairs = []
    for label, members in (pools or {}).items():
        missing = [m for m in members if m not in methods]
        if missing:
            raise EvalError(f"pool {label!r} names {', '.join(missing)}, which no compared run is; runs: "
                            f"{', '.join(methods)}", code="bad_pool")  # fmt: skip
        pooled_pairs.append(pooled(label, names, queries, [methods.index(m) for m in members], baseline=base,
                                   resamples=resamples, confidence=confidence, seed=seed))  # fmt: skip
    domains = sorted({s["domain"] for s in summaries})
    splits = sorted({s["split"] for s in summaries})
    label = f"{'+'.join(domains)}-{'+'.join(splits)}"
    table = comparison_table(summaries)
    if pairs:
        table += f"\n\nPaired differences against {names[base]} on shared queries:\n\n{paired_table(pairs, confidence)}"
    if pooled_pairs:
        table += (f"\n\nPooled over runs against {names[base]} (the CI resamples the runs, then the queries every run "
                  f"scored):\n\n{paired_table(pooled_pairs, confidence)}")  # fmt: skip
    if found:
        table += f"\n\nWARNING: not comparable, the runs differ in {describe(found)}."
    parent = ws.reports_dir / "compare"
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / f"{label}-{run_stamp()}"
    with staged(final) as tmp:
        atomic_write_text(tmp / TABLE, f"# Comparison: {label}\n\n{table}\n\n{FOUND_VS_SATISFIED}\n")
        atomic_write_json(
            tmp / JSON,
            {
                "runs": [str(p) for p in run_dirs],
                "summaries": summaries,
                "paired": [r.as_dict() for r in pairs],
                "pooled": [{**r.as_dict(), "members": list((pools or {})[r.method])} for r in pooled_pairs],
                "mismatches": found,
                "bootstrap": {"resamples": resamples, "confidence": confidence, "seed": seed},
            },
        )
        _figure(tmp / FIGURE, summaries, f"Hit@1 by level · {label}")
        if any("p@1" in sm["overall"]["metrics"] for sm in summaries):
            _figure(tmp / FIGURE_P1, summaries, f"P@1 by level · {label}", metric="p@1")
    return Comparison(
        path=final,
        table=table,
        runs=tuple(str(p) for p in run_dirs),
        paired=tuple(pairs),
        pooled=tuple(pooled_pairs),
        mismatches=found,
    )
