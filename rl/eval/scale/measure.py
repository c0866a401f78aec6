"""What a scaling run measures on its index, per planning candidate: latency one program at a time with cold
caches, the share of benchmark programs returning nothing, and P@1 judged on the corpus labels, broken down by
:mod:`rl.eval.scale.diagnosis`."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.errors import ProReError
from indexing.config import Config
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace
from rl.eval.scale import diagnosis
from rl.eval.scale.runs import DOMAIN, LEVELS, Candidate, K, Run, candidate_config, log


def satisfied(engine: Any, ws: Workspace, items: Sequence[tuple[Any, str]]) -> list[bool]:
    """Whether each (condition tree, document id) holds on this corpus: the relevant-set test of
    :mod:`rl.datasets.relevance`, for the named documents only (their label rows loaded, one scan per 64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.corpora.files import read_labels
    from rl.datasets.relevance import RelevanceJudge

    if not items:
        return []
    labels = read_labels(ws, DOMAIN)
    if labels is None:
        raise SystemExit("the corpus has no label table; P@1 needs one (a generated corpus)")
    wanted = pa.array(sorted({doc for _, doc in items}), pa.string())
    labels = labels.filter(pc.is_in(labels.column("doc_id"), value_set=wanted))
    handle = engine.handle
    with RelevanceJudge(handle.sql, handle.table, PRODUCTS.table, labels) as judge:
        return [r.has_gold for r in judge.relevant_sets(items)]


def run_quality(engine: Any, programs: Sequence[Any], batch: int = 50) -> tuple[list[Any], float]:
    """Every program's outcome (``execute_many`` in batches, cold caches) and the seconds it took."""
    engine.clear_caches()
    out: list[Any] = []
    t0 = time.perf_counter()
    for start in range(0, len(programs), batch):
        out.extend(engine.execute_many(programs[start : start + batch], k=K))
    return out, time.perf_counter() - t0


def run_latency(engine: Any, by_level: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """Per level: p50 / p95 of one program at a time with every cache cold, and each stage's median."""
    from serving.engine import STAGES

    out: dict[str, Any] = {}
    for level, programs in by_level.items():
        totals: list[float] = []
        stages: dict[str, list[float]] = {s: [] for s in STAGES}
        errors = 0
        for p in programs:
            engine.clear_caches()
            t0 = time.perf_counter()
            try:
                res = engine.execute(p, k=K)
            except ProReError:
                errors += 1
                continue
            totals.append((time.perf_counter() - t0) * 1000)
            for s in STAGES:
                stages[s].append(float(res.timings[s]))
        if not totals:
            out[level] = {"n": 0, "errors": errors}
            continue
        medians = {s: round(statistics.median(v), 3) for s, v in stages.items() if v}
        inner = {s: v for s, v in medians.items() if s != "total"}
        out[level] = {
            "n": len(totals),
            "errors": errors,
            "p50_ms": round(statistics.median(totals), 3),
            "p95_ms": round(float(np.percentile(totals, 95, method="inverted_cdf")), 3),  # the nearest rank
            "stage_median_ms": medians,
            "limiting_stage": max(inner, key=lambda s: inner[s]) if inner else None,
        }
    return out


def measure(
    cfg: Config, run: Run, bench_ws: Workspace, candidates: Sequence[Candidate], per_level: int
) -> dict[str, Any]:
    """Latency, empty share and P@1 of the benchmark's test split, per candidate."""
    from rl.datasets import load_manifest, load_split, tree
    from serving.dsl import parse_program
    from serving.engine import Engine

    instances = load_split(bench_ws, DOMAIN, "test")
    bench_manifest = load_manifest(bench_ws, DOMAIN)
    programs = [parse_program(i.program) for i in instances]
    trees = [tree.from_json(json.loads(i.tree)) for i in instances]
    by_level: dict[str, list[Any]] = {}
    for inst, prog in zip(instances, programs, strict=True):
        if len(by_level.setdefault(inst.level, [])) < per_level:
            by_level[inst.level].append(prog)
    by_level = {lv: by_level[lv] for lv in LEVELS if lv in by_level}
    levels = [i.level for i in instances]
    out: dict[str, Any] = {
        "benchmark": {
            "synthesized_on_docs": bench_manifest.get("corpus_rows"),
            "index_version": bench_manifest.get("index_version"),
            "instances": len(instances),
            "levels": {lv: levels.count(lv) for lv in LEVELS},
            "relevant_n_median_at_synthesis": statistics.median(
                [i.relevant_n for i in instances if i.relevant_n is not None] or [0]
            ),
        },
        "candidates": {},
    }
    tops: dict[str, list[str | None]] = {}
    kept: dict[str, list[Any]] = {}
    # The Milvus server answers its first pass over a freshly loaded collection differently from every later one
    # (measured at 50k: 16 of 300 first results differed, and each later pass agreed with the next), which had
    # made the first candidate measured a different index than the rest. One whole pass first, not measured.
    log(f"{run.label}: one unmeasured pass over the benchmark (the server's first answers differ)")
    with Engine.open(cfg, DOMAIN) as warm:
        run_quality(warm, programs)
    for c in candidates:
        log(f"{run.label}: measuring {c.label}")
        engine = Engine.open(candidate_config(cfg, c), DOMAIN)
        try:
            for p in programs[:5]:  # first-call costs (collection loads, model warm-up) are not latency
                with contextlib.suppress(ProReError):
                    engine.execute(p, k=K)
            outcomes, seconds = run_quality(engine, programs)
            latency = run_latency(engine, by_level)
        finally:
            engine.close()
        failed = [isinstance(o, ProReError) for o in outcomes]
        empty = [f or not o.ids for f, o in zip(failed, outcomes, strict=True)]
        tops[c.name] = [None if f or not o.ids else o.ids[0] for f, o in zip(failed, outcomes, strict=True)]
        kept[c.name] = [None if f else o for f, o in zip(failed, outcomes, strict=True)]
        out["candidates"][c.name] = {
            "label": c.label,
            "planning": dict(c.planning),
            "programs": len(programs),
            "errors": sum(failed),
            "error_codes": sorted({o.code for o in outcomes if isinstance(o, ProReError)}),
            "empty_share": round(sum(empty) / max(len(programs), 1), 4),
            "empty_share_by_level": {
                lv: round(sum(e for e, lvl in zip(empty, levels, strict=True) if lvl == lv) / n, 4)
                for lv in LEVELS
                if (n := levels.count(lv))
            },
            "batch_programs_per_s": round(len(programs) / max(seconds, 1e-9), 1),
            "latency": latency,
        }
    # P@1 for every candidate at once: which first results satisfy their request on this corpus; then the
    # break-down by what a program is, and why pure-vector L1 first results miss (bench/scale_diagnosis.py).
    program_traits = [diagnosis.traits(i) for i in instances]
    engine = Engine.open(cfg, DOMAIN)
    try:
        items = [(trees[i], doc) for ids in tops.values() for i, doc in enumerate(ids) if doc is not None]
        verdict = dict(
            zip(
                ((id(t), d) for t, d in items),
                satisfied(engine, Workspace(cfg.workspace), items),
                strict=True,
            )
        )
        for name, ids in tops.items():
            hits = [doc is not None and verdict[(id(trees[i]), doc)] for i, doc in enumerate(ids)]
            records = [
                diagnosis.record(o, h, t["gold"])
                for o, h, t in zip(kept[name], hits, program_traits, strict=True)
            ]
            out["candidates"][name]["breakdown"] = diagnosis.breakdown(program_traits, records)
            out["candidates"][name]["misses"] = diagnosis.misses(
                diagnosis.miss_texts(engine.handle, program_traits, records)
            )
    finally:
        engine.close()
    for name, ids in tops.items():
        hits = [doc is not None and verdict[(id(trees[i]), doc)] for i, doc in enumerate(ids)]
        entry = out["candidates"][name]
        entry["p_at_1"] = round(sum(hits) / max(len(hits), 1), 4)
        entry["p_at_1_by_level"] = {
            lv: round(sum(h for h, lvl in zip(hits, levels, strict=True) if lvl == lv) / n, 4)
            for lv in LEVELS
            if (n := levels.count(lv))
        }
    return out
