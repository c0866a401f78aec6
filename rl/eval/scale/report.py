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
from rl.eval.scale.runs import BUILD_STAGES, GOAL_P1_RATIO, GOAL_P50_MS, LEVELS, K, atomic_json, size_label


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
    """Where the two goals stand: p50 <= 50 ms at 1M; P@1 with pushdown at 1M >= 0.95 x P@1 at 5k."""
    runs = results["runs"]
    out: dict[str, Any] = {}
    for e in results["embedders"]:
        mine = sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])
        if not mine:
            continue
        top, base = mine[-1], mine[0]
        at = size_label(top["docs"])
        reached_1m = top["docs"] >= 1_000_000
        lat: dict[str, Any] = {
            "goal": f"p50 <= {GOAL_P50_MS:.0f} ms at 1M",
            "measured_at": at,
            "reached_1M": reached_1m,
        }
        for name, c in top["candidates"].items():
            per_level = {
                lv: c["latency"][lv]["p50_ms"] for lv in LEVELS if "p50_ms" in c["latency"].get(lv, {})
            }
            if not per_level:
                continue
            worst = max(per_level, key=lambda lv: per_level[lv])
            lat[name] = {
                "p50_ms": per_level,
                "worst_level": worst,
                "limiting_stage": c["latency"][worst].get("limiting_stage"),
                "met": reached_1m and all(v <= GOAL_P50_MS for v in per_level.values()),
            }
        quality: dict[str, Any] = {
            "goal": f"P@1 with pushdown at 1M >= {GOAL_P1_RATIO} x P@1 at {size_label(base['docs'])}",
            "measured_at": at,
            "reached_1M": reached_1m,
        }
        for name in ("pushdown", "fixed"):
            if name in top["candidates"] and name in base["candidates"]:
                p_top, p_base = top["candidates"][name]["p_at_1"], base["candidates"][name]["p_at_1"]
                ratio = _div(p_top, p_base)
                quality[name] = {
                    "p_at_1": p_top,
                    "p_at_1_smallest": p_base,
                    "p_at_1_smallest_fixed": base["candidates"].get("fixed", {}).get("p_at_1"),
                    "ratio": ratio,
                    "met": reached_1m and name == "pushdown" and ratio is not None and ratio >= GOAL_P1_RATIO,
                }
        if "pushdown" not in top["candidates"]:
            quality["pushdown"] = "not measured: the engine has no serving.planning.pushdown yet"
        out[e] = {"latency": lat, "quality": quality}
    return out


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
    lines += ["", "benchmark programs (test split, synthesized on the smallest size): returning nothing, P@1"]
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
    lines.append("")
    for e, g in results["goals"].items():
        lat, q = g["latency"], g["quality"]
        for name in results["candidates"]:
            if name in lat:
                x = lat[name]
                lines.append(
                    f"goal {lat['goal']} [{e}, {results['candidates'][name]['label']}]: at {lat['measured_at']} "
                    f"p50 L1/L2/L3 {'/'.join(_f(x['p50_ms'].get(lv)) for lv in LEVELS)} ms, worst {x['worst_level']} "
                    f"limited by {x['limiting_stage']}: "
                    + (("met" if x["met"] else "NOT met") if lat["reached_1M"] else "open, 1M not measured")
                )
        for name in ("pushdown", "fixed"):
            x = q.get(name)
            if isinstance(x, dict):
                lines.append(
                    f"goal {q['goal']} [{e}, {name}]: at {q['measured_at']} P@1 {x['p_at_1']:.3f} vs "
                    f"{x['p_at_1_smallest']:.3f} = {_f(x['ratio'], '.2f')}x"
                    + (
                        " (reference)"
                        if name != "pushdown"
                        else (": met" if x["met"] else ": NOT met")
                        if q["reached_1M"]
                        else ": open, 1M not measured"
                    )
                )
            elif isinstance(x, str):
                lines.append(f"goal {q['goal']} [{e}]: {x}")
    return "\n".join(lines)
