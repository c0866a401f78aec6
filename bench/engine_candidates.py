"""Engine candidates side by side (section 0 of ``bench/engine.py``): vector store x query embedder runtime x how
id sets reach ClickHouse, each L1 / L2 / L3 program on every candidate in a seeded random order with cold caches;
p50 / p95 per level and stage as ratios to the baseline candidate, ranked-id agreement and rows read."""

from __future__ import annotations

import dataclasses
import itertools
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from common import percentile
from engine_programs import program

from indexing.config import Config
from serving.dsl import Program, parse_program
from serving.engine import Engine, ExecutionResult
from serving.settings import SqlSettings

# -- candidates side by side ----------------------------------------------------------------------

COMPARED_STAGES = ("embed", "ann", "sql")
BACKENDS = ("torch", "onnx", "onnx-int8")
ID_MODES: tuple[Literal["literal", "bound"], ...] = ("literal", "bound")


@dataclass(frozen=True)
class Candidate:
    milvus: str
    """``lite`` or ``server``."""
    backend: str
    """``embedder.minilm_backend``."""
    ids: Literal["literal", "bound"]
    """``serving.sql.ids``."""

    @property
    def label(self) -> str:
        return f"{self.milvus}/{self.backend}/{self.ids}"


BASELINE = Candidate("lite", "torch", "literal")


def candidate_engine(cfg: Config, c: Candidate) -> Engine:
    embedder = dataclasses.replace(cfg.embedder, minilm_backend=c.backend)
    return Engine.open(cfg.replace(embedder=embedder), "ecommerce", sql_settings=SqlSettings(ids=c.ids))


def level_programs(docs: Sequence[dict[str, Any]], per_level: int) -> dict[str, list[Program]]:
    rng = random.Random(7)
    out: dict[str, list[Program]] = {}
    for level in (1, 2, 3):
        out[f"L{level}"] = [
            parse_program(program(level, docs[(level * per_level + i) % len(docs)],
                                  docs[(level * per_level + i + 1) % len(docs)], rng))
            for i in range(per_level)
        ]  # fmt: skip
    return out


def rows_read(engine: Engine, result: ExecutionResult) -> int:
    """Rows ClickHouse reads for the program's statement (primary-key pruning included)."""
    bound = engine.sql_settings.ids == "bound"
    params = {name: list(ids) for name, ids in result.candidates.items()} if bound else None
    return engine.handle.sql.estimate_rows(result.sql, params=params)


def compare(cfgs: dict[str, Config], docs: Sequence[dict[str, Any]], per_level: int) -> dict[str, Any]:
    """Every candidate on the same cold-cache programs, interleaved; p50 / p95 per level and stage."""
    candidates = [Candidate(m, b, i) for m, b, i in itertools.product(cfgs, BACKENDS, ID_MODES)]
    engines = {c: candidate_engine(cfgs[c.milvus], c) for c in candidates}
    programs = level_programs(docs, per_level)
    try:
        for engine in engines.values():  # first-call costs (model load, collection load) are not latency
            for p in programs["L3"][:3]:
                engine.execute(p, k=10)
        samples: dict[Candidate, dict[str, dict[str, list[float]]]] = {
            c: {lvl: {s: [] for s in (*COMPARED_STAGES, "total")} for lvl in programs} for c in candidates
        }
        agree: dict[Candidate, list[bool]] = {c: [] for c in candidates}
        overlap: dict[Candidate, list[float]] = {c: [] for c in candidates}
        read: dict[str, dict[str, list[int]]] = {m: {lvl: [] for lvl in programs} for m in cfgs}
        shuffle = random.Random(3)
        for lvl, batch in programs.items():
            for p in batch:
                answers: dict[Candidate, tuple[str, ...]] = {}
                order = shuffle.sample(candidates, len(candidates))
                for c in order:
                    engine = engines[c]
                    engine.clear_caches()
                    start = time.perf_counter()
                    res = engine.execute(p, k=10)
                    elapsed = (time.perf_counter() - start) * 1000
                    for s in COMPARED_STAGES:
                        samples[c][lvl][s].append(res.timings[s])
                    samples[c][lvl]["total"].append(elapsed)
                    answers[c] = res.ids
                    if c.backend == "torch" and c.ids == "bound":
                        read[c.milvus][lvl].append(rows_read(engine, res))
                for c in candidates:
                    agree[c].append(answers[c] == answers[BASELINE])
                    mine, theirs = set(answers[c]), set(answers[BASELINE])
                    overlap[c].append(len(mine & theirs) / len(mine | theirs) if mine | theirs else 1.0)
    finally:
        for engine in engines.values():
            engine.close()
    out: dict[str, Any] = {"baseline": BASELINE.label, "programs_per_level": per_level, "candidates": {}}
    for c in candidates:
        levels: dict[str, Any] = {}
        for lvl, stages in samples[c].items():
            base = samples[BASELINE][lvl]
            levels[lvl] = {
                **{f"{s}_p50_ms": statistics.median(v) for s, v in stages.items()},
                **{f"{s}_p95_ms": percentile(v, 95) for s, v in stages.items()},
                **{f"{s}_ratio_p50": statistics.median(v) / max(statistics.median(base[s]), 1e-9)
                   for s, v in stages.items()},
            }  # fmt: skip
        out["candidates"][c.label] = {
            "milvus": c.milvus,
            "minilm_backend": c.backend,
            "sql_ids": c.ids,
            "levels": levels,
            "same_ids_as_baseline": sum(agree[c]) / len(agree[c]),
            "jaccard_with_baseline": statistics.mean(overlap[c]),
        }
    out["rows_read_p50"] = {
        m: {lvl: statistics.median(v) for lvl, v in by_level.items()} for m, by_level in read.items()
    }
    out["axes"] = axis_effects(out["candidates"], candidates, list(programs))
    out["seen_statements"] = seen_statements(cfgs["lite"], programs)
    with Engine.open(cfgs["lite"], "ecommerce") as e:
        out["table_rows"] = e.handle.rows
        out["index_granularity"] = cfgs["lite"].clickhouse.index_granularity
    best = {
        lvl: min(out["candidates"], key=lambda label: out["candidates"][label]["levels"][lvl]["total_p50_ms"])
        for lvl in programs
    }
    out["best"] = {
        lvl: {
            "candidate": label,
            "total_p50_ms": out["candidates"][label]["levels"][lvl]["total_p50_ms"],
            "limiting_stage": max(
                COMPARED_STAGES, key=lambda s: out["candidates"][label]["levels"][lvl][f"{s}_p50_ms"]
            ),
        }
        for lvl, label in best.items()
    }
    return out


AXES: dict[str, tuple[str, str, str]] = {
    "server / lite": ("milvus", "server", "lite"),
    "onnx / torch": ("backend", "onnx", "torch"),
    "onnx-int8 / torch": ("backend", "onnx-int8", "torch"),
    "bound / literal": ("ids", "bound", "literal"),
}
"""One change at a time: ``(field, candidate value, reference value)``."""


def partner(c: Candidate, name: str, value: str) -> str:
    """The label of ``c`` with its field ``name`` set to ``value``."""
    chosen = {**dataclasses.asdict(c), name: value}
    return f"{chosen['milvus']}/{chosen['backend']}/{chosen['ids']}"


def axis_effects(
    measured: dict[str, Any], candidates: Sequence[Candidate], levels: Sequence[str]
) -> dict[str, Any]:
    """Per axis, level and stage: the median over matched pairs (the other two choices equal) of the
    ratio of p50s, one change against its reference. Robuster on a loaded machine than one ratio."""
    out: dict[str, Any] = {}
    labels = {c.label for c in candidates}
    for axis, (name, value, reference) in AXES.items():
        pairs = [(c.label, partner(c, name, reference)) for c in candidates if getattr(c, name) == value]
        pairs = [(a, b) for a, b in pairs if b in labels]
        if not pairs:
            continue
        out[axis] = {
            lvl: {
                s: statistics.median(
                    measured[a]["levels"][lvl][f"{s}_p50_ms"]
                    / max(measured[b]["levels"][lvl][f"{s}_p50_ms"], 1e-9)
                    for a, b in pairs
                )
                for s in ("total", *COMPARED_STAGES)
            }
            for lvl in levels
        }
        out[axis]["pairs"] = len(pairs)
    return out


def seen_statements(
    cfg: Config, programs: dict[str, list[Program]], backend: str = "onnx-int8"
) -> dict[str, Any]:
    """SQL stage (ms p50) of each program's statement run a second time with other ids, literal vs bound.

    Each program runs once, then again with the next program's phrases in its entries (same SQL, new
    candidate lists); only the second run is measured. Bound ids reuse the statement rendered the first
    time; literal ids render it again."""
    engines = {ids: candidate_engine(cfg, Candidate("lite", backend, ids)) for ids in ID_MODES}
    shuffle = random.Random(5)
    sql: dict[str, dict[str, list[float]]] = {ids: {lvl: [] for lvl in programs} for ids in ID_MODES}
    try:
        for lvl, batch in programs.items():
            for i, p in enumerate(batch):
                other = batch[(i + 1) % len(batch)]
                entries = tuple(
                    dataclasses.replace(mine, query=theirs.query)
                    for mine, theirs in zip(p.retrieval_list, other.retrieval_list, strict=True)
                )
                variant = dataclasses.replace(p, retrieval_list=entries)
                for ids in shuffle.sample(ID_MODES, len(ID_MODES)):
                    engine = engines[ids]
                    engine.clear_caches()
                    engine.execute(p, k=10)
                    sql[ids][lvl].append(engine.execute(variant, k=10).timings["sql"])
    finally:
        for engine in engines.values():
            engine.close()
    out: dict[str, Any] = {"backend": backend}
    for lvl in programs:
        literal, bound = (statistics.median(sql[ids][lvl]) for ids in ("literal", "bound"))
        out[lvl] = {"literal_sql_p50_ms": literal, "bound_sql_p50_ms": bound, "ratio": bound / literal}
    return out


def compare_table(r: dict[str, Any], corpus: str) -> str:
    lines = [
        f"candidates side by side, {corpus} products, cold caches, {r['programs_per_level']} programs per level; "
        f"ms p50/p95; x = p50 / baseline p50 (baseline {r['baseline']})"
    ]
    stages = ("total", *COMPARED_STAGES)
    head = f"{'milvus/embedder/sql ids':<24} {'lvl':<3} " + " ".join(f"{s + ' p50/p95':>15}" for s in stages)
    lines.append(head + f" {'x total':>7} {'x sql':>6} {'x embed':>7} {'same ids':>8} {'jaccard':>7}")
    for label, cand in r["candidates"].items():
        for lvl, m in cand["levels"].items():
            cells = " ".join(f"{m[f'{s}_p50_ms']:>7.1f}/{m[f'{s}_p95_ms']:<7.1f}" for s in stages)
            lines.append(
                f"{label:<24} {lvl:<3} {cells} {m['total_ratio_p50']:>7.2f} {m['sql_ratio_p50']:>6.2f} "
                f"{m['embed_ratio_p50']:>7.2f} {cand['same_ids_as_baseline']:>8.0%} "
                f"{cand['jaccard_with_baseline']:>7.2f}"
            )
    lines.append("")
    lines.append("one change at a time: median over matched pairs of the p50 ratio (total, embed, ann, sql)")
    for axis, by_level in r["axes"].items():
        cells = "  ".join(
            f"{lvl} " + "/".join(f"{by_level[lvl][s]:.2f}" for s in ("total", *COMPARED_STAGES))
            for lvl in by_level
            if lvl != "pairs"
        )
        lines.append(f"{axis:<18} ({by_level['pairs']} pairs)  {cells}")
    for milvus, by_level in r["rows_read_p50"].items():
        cells = ", ".join(f"{lvl} {v:.0f}" for lvl, v in by_level.items())
        lines.append(
            f"rows read p50 ({milvus} tables, {r['table_rows']} rows, {r['index_granularity']}-row granules): {cells}"
        )
    seen = r["seen_statements"]
    lines.append(
        "statement seen before, new ids: sql p50 literal -> bound ms (x) "
        + ", ".join(
            f"{lvl} {m['literal_sql_p50_ms']:.1f} -> {m['bound_sql_p50_ms']:.1f} ({m['ratio']:.2f})"
            for lvl, m in seen.items()
            if lvl != "backend"
        )
    )
    for lvl, b in r["best"].items():
        lines.append(
            f"fastest {lvl}: {b['candidate']} at {b['total_p50_ms']:.1f} ms p50, largest stage: {b['limiting_stage']}"
        )
    return "\n".join(lines)
