"""A scaling benchmark's results: ratios against the smallest size, where its goals stand, extrapolations of the
sizes not built, the JSON and plots (:func:`finish`) and the table printed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rl.eval.scale import diagnosis
from rl.eval.scale.estimates import extrapolate
from rl.eval.scale.plots import plots
from rl.eval.scale.runs import (
    BUILD_STAGES,
    DEFAULT_CANDIDATE,
    GOAL_EMPTY,
    GOAL_P1_RATIO,
    GOAL_P50_MS,
    GOAL_P95_MS,
    LEVELS,
    K,
    atomic_json,
    size_label,
)


def finish(results: dict[str, Any], out: Path) -> None:
    """Ratios, goals and extrapolations from the runs so far; write the JSON to ``out`` and the plots beside it."""
    runs = results["runs"]
    results["ratios"] = ratios(runs)
    results["extrapolated"] = {}
    for e in results["embedders"]:
        mine = [r for r in runs if r["embedder"] == e]
        for skip in results["skipped"]:
            if skip["embedder"] == e and mine:
                results["extrapolated"][skip["label"]] = extrapolate(mine, skip["docs"])
    results["goals"] = goals(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_json(out, results)
    if runs:
        results["plots"] = plots(results, out.parent, out.stem)
        atomic_json(out, results)


def ratios(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each run against the smallest size of its embedder: build seconds per doc, p50 per level, P@1, empty share."""
    out = []
    for e in dict.fromkeys(r["embedder"] for r in runs):
        mine = sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])
        base = mine[0]
        for r in mine[1:]:
            row: dict[str, Any] = {"embedder": e, "ratio": f"{size_label(r['docs'])} / {size_label(base['docs'])}",
                                   "docs_ratio": r["docs"] / base["docs"]}  # fmt: skip
            row["build_s_per_doc"] = {
                s: _div(
                    r["build"]["seconds"].get(s, math.nan) / r["docs"],
                    base["build"]["seconds"].get(s, math.nan) / base["docs"],
                )
                for s in BUILD_STAGES
            }
            row["candidates"] = {}
            for name, c in r["candidates"].items():
                b = base["candidates"].get(name)
                if b is None:
                    continue
                row["candidates"][name] = {
                    "p50_ms": {
                        lv: _div(
                            c["latency"].get(lv, {}).get("p50_ms"), b["latency"].get(lv, {}).get("p50_ms")
                        )
                        for lv in LEVELS
                    },
                    "p_at_1": _div(c["p_at_1"], b["p_at_1"]),
                    "empty_share": _div(c["empty_share"], b["empty_share"]),
                }
            out.append(row)
    return out


def _div(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return round(float(a) / float(b), 3)


def goals(results: Mapping[str, Any]) -> dict[str, Any]:
    """Where each candidate stands on the three goals, per embedder; the default engine's decide them.

    * quality: P@1 at the largest size measured >= ``GOAL_P1_RATIO`` x P@1 at the smallest;
    * empty: at most ``GOAL_EMPTY`` of the programs return nothing, at every size measured;
    * latency: p50 <= ``GOAL_P50_MS`` and p95 <= ``GOAL_P95_MS`` per level at 1M (open until 1M is measured).
    """
    out: dict[str, Any] = {}
    for e in results["embedders"]:
        mine = sorted((r for r in results["runs"] if r["embedder"] == e), key=lambda r: r["docs"])
        if not mine:
            continue
        top, base = mine[-1], mine[0]
        reached_1m = top["docs"] >= 1_000_000
        per: dict[str, Any] = {}
        for name, c in top["candidates"].items():
            p_base = base["candidates"].get(name, {}).get("p_at_1")
            ratio = _div(c.get("p_at_1"), p_base)
            empties = [r["candidates"][name]["empty_share"] for r in mine if name in r["candidates"]]
            lat = {lv: c["latency"].get(lv, {}) for lv in LEVELS}
            fast = all(
                x.get("p50_ms", math.inf) <= GOAL_P50_MS and x.get("p95_ms", math.inf) <= GOAL_P95_MS
                for x in lat.values()
            )
            per[name] = {
                "p_at_1": c.get("p_at_1"),
                "p_at_1_smallest": p_base,
                "ratio": ratio,
                "quality_met": ratio is not None and ratio >= GOAL_P1_RATIO,
                "empty_max": max(empties, default=None),
                "empty_met": bool(empties) and max(empties) <= GOAL_EMPTY,
                "p50_p95_ms": {lv: [x.get("p50_ms"), x.get("p95_ms")] for lv, x in lat.items()},
                "latency_met": reached_1m and fast,
            }
        out[e] = {
            "largest": size_label(top["docs"]),
            "smallest": size_label(base["docs"]),
            "reached_1M": reached_1m,
            "default": DEFAULT_CANDIDATE,
            "candidates": per,
        }
    return out


def goal_lines(results: Mapping[str, Any]) -> list[str]:
    """The goals as lines: one per embedder and candidate, the default engine's first."""
    lines = [
        f"goals: P@1 at the largest size >= {GOAL_P1_RATIO} x at the smallest; programs returning nothing <= "
        f"{GOAL_EMPTY:.0%} at every size; p50 <= {GOAL_P50_MS:.0f} ms and p95 <= {GOAL_P95_MS:.0f} ms per level at 1M"
    ]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for e, g in results["goals"].items():
        names = sorted(g["candidates"], key=lambda n: n != g["default"])
        for name in names:
            x = g["candidates"][name]
            label = results["candidates"].get(name, {}).get("label", name)
            latency = met(x["latency_met"]) if g["reached_1M"] else "open, 1M not measured"
            lines.append(
                f"[{e}, {label}{' (default)' if name == g['default'] else ''}] P@1 {g['largest']} / {g['smallest']} "
                f"{_f(x['p_at_1'], '.3f')} / {_f(x['p_at_1_smallest'], '.3f')} = {_f(x['ratio'], '.2f')}x "
                f"{met(x['quality_met'])}; most empty {_f(x['empty_max'], '.1%')} {met(x['empty_met'])}; "
                f"latency {latency}"
            )
    return lines


def _f(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(results: Mapping[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load average at start "
        f"{m['load_avg_1m_at_start']:.1f}; Milvus standalone server, HNSW "
        f"M={results['hnsw']['M']} efConstruction={results['hnsw']['efConstruction']} ef={results['hnsw']['ef']}, K={K}",
    ]
    for e, n in results["neural"].items():
        lines.append(
            f"{e}: {n['products_per_s']} products/s measured; sizes within {n['budget_min']:.0f} min of embedding: "
            f"{', '.join(size_label(s) for s in n['sizes']) or 'none'}"
        )
    lines += ["", "build seconds per stage (reused = built by an earlier invocation) and peak RSS (MB)"]
    lines.append(
        f"{'run':<24} " + " ".join(f"{s:>10}" for s in BUILD_STAGES) + f" {'bench MB':>9} {'milvus MB':>9}"
    )
    for r in results["runs"]:
        secs = r["build"]["seconds"]
        peaks = r["memory_peaks_mb"] | r["build"].get("memory", {})
        bench_mb = max((p.get("bench_mb", 0) for p in peaks.values()), default=0)
        milvus_mb = max((p.get("milvus_mb", 0) for p in peaks.values()), default=0)
        tag = " (reused)" if r["build"].get("reused") else ""
        lines.append(
            f"{r['label'] + tag:<24} "
            + " ".join(f"{_f(secs.get(s)):>10}" for s in BUILD_STAGES)
            + f" {bench_mb:>9.0f} {milvus_mb:>9.0f}"
        )
    lines += ["", "latency per level, ms, one program at a time, caches cold: p50 / p95 (limiting stage)"]
    lines.append(f"{'run':<24} {'candidate':<22} " + " ".join(f"{lv:>26}" for lv in LEVELS))
    for r in results["runs"]:
        for c in r["candidates"].values():
            cells = []
            for lv in LEVELS:
                x = c["latency"].get(lv, {})
                cells.append(
                    f"{_f(x.get('p50_ms'))} / {_f(x.get('p95_ms'))} ({x.get('limiting_stage') or '-'})"
                )
            lines.append(f"{r['label']:<24} {c['label']:<22} " + " ".join(f"{cell:>26}" for cell in cells))
    kept = results.get("kept_under", "fixed-k")  # results written before the mode was recorded: fixed K's
    lines += [
        "",
        f"benchmark programs (test split, synthesized on the smallest size under planning mode {kept}): "
        "returning nothing, P@1",
    ]
    lines.append(f"{'run':<24} {'candidate':<22} {'empty':>7} {'errors':>7} {'P@1':>7} {'P@1 L1/L2/L3':>20}")
    for r in results["runs"]:
        for c in r["candidates"].values():
            by = "/".join(_f(c["p_at_1_by_level"].get(lv), ".2f") for lv in LEVELS)
            lines.append(
                f"{r['label']:<24} {c['label']:<22} {c['empty_share']:>7.1%} {c['errors']:>7} "
                f"{c['p_at_1']:>7.3f} {by:>20}"
            )
    for e in dict.fromkeys(r["embedder"] for r in results["runs"]):
        mine = [r for r in results["runs"] if r["embedder"] == e]
        for name in results["candidates"]:
            lines += diagnosis.table(mine, name)
    if results["ratios"]:
        lines += ["", "ratios against the smallest size (build: seconds per doc; p50: ms; >1 = more)"]
        lines.append(
            f"{'embedder':<18} {'ratio':<12} {'build total/doc':>15} {'embed/doc':>10} {'milvus/doc':>10}"
            f" {'candidate':<22} {'p50 L1':>7} {'p50 L2':>7} {'p50 L3':>7} {'P@1':>6}"
        )
        for q in results["ratios"]:
            b = q["build_s_per_doc"]
            for name, c in (q["candidates"] or {"-": {}}).items():
                p = c.get("p50_ms", {})
                lines.append(
                    f"{q['embedder']:<18} {q['ratio']:<12} {_f(b['total'], '.2f'):>15} {_f(b['embed'], '.2f'):>10}"
                    f" {_f(b['milvus'], '.2f'):>10} {results['candidates'].get(name, {}).get('label', name):<22}"
                    f" {_f(p.get('L1'), '.2f'):>7} {_f(p.get('L2'), '.2f'):>7} {_f(p.get('L3'), '.2f'):>7}"
                    f" {_f(c.get('p_at_1'), '.2f'):>6}"
                )
    if results["skipped"]:
        lines += ["", "not run"]
        for s in results["skipped"]:
            ex = results["extrapolated"].get(s["label"])
            note = ""
            if ex and ex["seconds"]:
                parts = ", ".join(f"{k} {v:,.0f}" for k, v in ex["seconds"].items())
                note = f"; extrapolated build s from {', '.join(size_label(n) for n in ex['from_sizes'])}: {parts}"
                if ex.get("seconds_from_last_two"):
                    last = ", ".join(f"{k} {v:,.0f}" for k, v in ex["seconds_from_last_two"].items())
                    note += f"; from the two largest alone: {last}"
            lines.append(f"  {s['label']}: {s['why']}{note}")
            for name, per_level in (ex or {}).get("p50_ms", {}).items():
                if per_level:
                    trend = "/".join(_f(per_level.get(lv)) for lv in LEVELS)
                    label = results["candidates"].get(name, {}).get("label", name)
                    lines.append(f"    p50 L1/L2/L3 trend at {size_label(s['docs'])}, {label}: {trend} ms")
    codes = sorted({r.get("code") for r in results["runs"]} - {None})
    if len(codes) > 1:
        lines += [
            "",
            f"WARNING: the engine or store code changed between runs (fingerprints {', '.join(codes)})",
        ]
    if results["candidates_left_out"]:
        lines += [
            "",
            "candidates left out: "
            + "; ".join(f"{k} ({v})" for k, v in results["candidates_left_out"].items()),
        ]
    lines += ["", *goal_lines(results)]
    return "\n".join(lines)
