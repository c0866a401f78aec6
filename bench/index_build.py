"""Index build throughput: documents per second per stage, side by side across configurations.

Stages: generate (seeded corpus generator + parquet write), embed, ClickHouse write (chDB),
Milvus write (Milvus Lite upserts), BM25 (bm25s over every text and image field) and the total.
Configurations: the hashing embedder at 5k and 100k documents (how the stores scale) and MiniLM at
5k (what a neural model costs). Ratios compare configurations stage by stage.

Run ``python bench/index_build.py`` (``--quick`` for a small smoke run). Prints a table and writes
``bench/results/index_build.json``.

``--engines`` compares the build engines instead (``build.engine``: ``local`` and ``ray``) side by side
on one corpus size, with the hashing embedder and MiniLM: docs/s per stage, the median of
``--repeats`` fresh builds each, and the ratio ray / local. Ray is started once before the runs and
its start is reported apart (a cluster's Ray is up before a job runs). Writes
``bench/results/index_build_engines.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from common import RESULTS, ROOT, machine, run_main, write_results

from indexing.build import build_index
from indexing.config import BuildConfig, ClickHouseConfig, Config, EmbedderConfig
from indexing.corpora import generate
from indexing.corpora.files import write_corpus
from indexing.embedders import make_embedder
from indexing.schema import DOMAINS, Role, schema_for
from indexing.workspace import Workspace
from rl.eval.scale.runs import Run

STAGES = ("generate", "embed", "clickhouse", "milvus", "bm25", "total")
DEFAULT_OUT = RESULTS / "index_build.json"
ENGINE_STAGES = ("embed", "clickhouse", "milvus", "bm25", "total")
"""Per-engine stages: ``embed`` is the wait for the next embedded chunk (under ray the pipeline's other
stages overlap it), ``total`` the whole build call."""
ENGINES_OUT = RESULTS / "index_build_engines.json"


def run_one(cfg: Config, domain: str, run: Run, batch_rows: int) -> dict[str, Any]:
    """Generate the corpus, build the index, return seconds and docs/s per stage."""
    cfg = cfg.replace(embedder=EmbedderConfig(text=run.embedder, image=run.embedder))
    schema = schema_for(domain)
    # One-time costs (vocabulary tables, model weights) are not throughput: pay them untimed.
    for _ in generate(domain, 10, seed=1):
        pass
    make_embedder(cfg.embedder, Role.TEXT).embed(["warm up"])
    t0 = time.perf_counter()
    write_corpus(
        Workspace(cfg.workspace),
        schema,
        generate(domain, run.docs, seed=0),
        {"generator": domain, "size": run.docs},
    )
    generate_s = time.perf_counter() - t0
    result = build_index(cfg, domain, batch_rows=batch_rows, progress=None)
    if result.status != "built" or result.rows != run.docs:
        raise SystemExit(f"unexpected build result for {domain} {run.label}: {result}")
    t = result.times
    seconds = {
        "generate": generate_s,
        "embed": t.embed_s,
        "clickhouse": t.clickhouse_s,
        "milvus": t.milvus_s,
        "bm25": t.bm25_s,
    }
    seconds["total"] = sum(seconds.values()) + t.verify_s
    return {
        "domain": domain,
        "config": run.label,
        "embedder": run.embedder,
        "docs": run.docs,
        "vector_fields": len(schema.vector_fields),
        "version": result.version,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "docs_per_s": {k: round(run.docs / v, 1) if v > 0 else None for k, v in seconds.items()},
    }


def ratios(rows: list[dict[str, Any]], runs: list[Run]) -> list[dict[str, Any]]:
    """Per domain and stage: seconds per document of a configuration over that of the hashing baseline."""
    base, big, neural = runs
    out = []
    for domain in dict.fromkeys(r["domain"] for r in rows):
        by = {r["config"]: r for r in rows if r["domain"] == domain}
        for num, den, what in (
            (big, base, "time per doc, larger corpus / smaller"),
            (neural, base, "time per doc, MiniLM / hashing"),
        ):
            if num.label not in by or den.label not in by:
                continue
            a, b = by[num.label], by[den.label]
            per_doc = {
                s: round((a["seconds"][s] / a["docs"]) / (b["seconds"][s] / b["docs"]), 2)
                if b["seconds"][s] > 0
                else None
                for s in STAGES
            }
            out.append(
                {"domain": domain, "ratio": f"{num.label} / {den.label}", "meaning": what, "per_doc": per_doc}
            )
    return out


def table(rows: list[dict[str, Any]], rats: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [
        f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
        f"load average at start {info['load_avg_1m_at_start']}",
        "",
        "docs/s per stage (higher is better)",
        f"{'domain':<10} {'config':<13} {'docs':>7} " + " ".join(f"{s:>11}" for s in STAGES),
    ]
    for r in rows:
        cells = " ".join(f"{(r['docs_per_s'][s] or 0):>11,.0f}" for s in STAGES)
        lines.append(f"{r['domain']:<10} {r['config']:<13} {r['docs']:>7} {cells}")
    if rats:
        lines += ["", "ratios of time per document (1.00 = same cost per doc; >1 = slower per doc)"]
        lines.append(f"{'domain':<10} {'ratio':<28} " + " ".join(f"{s:>11}" for s in STAGES))
        for q in rats:
            cells = " ".join(f"{(q['per_doc'][s] or 0):>11.2f}" for s in STAGES)
            lines.append(f"{q['domain']:<10} {q['ratio']:<28} {cells}")
    return "\n".join(lines)


def run_engine(
    root: Path, domain: str, embedder: str, docs: int, engine: Literal["local", "ray"], actors: int, name: str
) -> dict[str, float]:
    """One fresh build of a generated corpus with ``engine``: seconds per stage (generation untimed).

    ``name`` keeps the build's workspace and ClickHouse database apart from the others'.
    """
    ws = root / f"{engine}-{embedder}-{name}"
    cfg = Config(
        workspace=ws,
        clickhouse=ClickHouseConfig(
            chdb_path=str(root / "chdb"), database=f"bench_{engine}_{embedder.replace('-', '_')}_{name}"
        ),
        embedder=EmbedderConfig(text=embedder, image=embedder),
        build=BuildConfig(engine=engine, ray_actors=actors),
    )
    write_corpus(
        Workspace(ws), schema_for(domain), generate(domain, docs, seed=0), {"generator": domain, "size": docs}
    )
    t0 = time.perf_counter()
    result = build_index(cfg, domain, progress=False)
    total = time.perf_counter() - t0
    if result.status != "built" or result.rows != docs:
        raise SystemExit(f"unexpected {engine} build of {domain} {docs}: {result}")
    t = result.times
    return {
        "embed": t.embed_s,
        "clickhouse": t.clickhouse_s,
        "milvus": t.milvus_s,
        "bm25": t.bm25_s,
        "total": total,
    }


def compare_engines(args: argparse.Namespace, domains: list[str], info: dict[str, Any]) -> int:
    """``--engines``: local vs ray, median docs/s per stage over ``--repeats`` fresh builds, and their ratio."""
    import ray

    docs = args.engine_docs or (1000 if args.quick else 5000)
    embedders = [e for e in args.embedders.split(",") if e]
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="prore-bench-engines-"))
    t0 = time.perf_counter()
    ray.init(
        num_cpus=args.actors + 1, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False
    )
    ray_start_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    try:
        for domain in domains:
            for embedder in embedders:
                for _ in generate(domain, 10, seed=1):  # vocabulary tables: a one-time cost
                    pass
                make_embedder(EmbedderConfig(text=embedder, image=embedder), Role.TEXT).embed(["warm up"])
                # The first ray build also starts the actors' worker processes: warm them up, untimed.
                run_engine(root, domain, embedder, 100, "ray", args.actors, "warmup")
                engines: tuple[Literal["local", "ray"], ...] = ("local", "ray")
                for engine in engines:
                    runs = []
                    for n in range(args.repeats):
                        print(
                            f"... {domain} {embedder} {docs} {engine} run {n + 1}",
                            file=sys.stderr,
                            flush=True,
                        )
                        runs.append(run_engine(root, domain, embedder, docs, engine, args.actors, f"run{n}"))
                    seconds = {s: statistics.median(r[s] for r in runs) for s in ENGINE_STAGES}
                    rows.append({
                        "domain": domain, "embedder": embedder, "engine": engine, "docs": docs,
                        "actors": args.actors if engine == "ray" else None, "repeats": args.repeats,
                        "seconds_median": {k: round(v, 3) for k, v in seconds.items()},
                        "docs_per_s": {k: round(docs / v, 1) if v > 0 else None for k, v in seconds.items()},
                        "total_s_runs": [round(r["total"], 3) for r in runs],
                    })  # fmt: skip
    finally:
        ray.shutdown()
    ratios = []
    for domain in domains:
        for embedder in embedders:
            by = {r["engine"]: r for r in rows if r["domain"] == domain and r["embedder"] == embedder}
            a, b = by["ray"]["docs_per_s"], by["local"]["docs_per_s"]
            per = {s: round(a[s] / b[s], 2) if a[s] and b[s] else None for s in ENGINE_STAGES}
            ratios.append(
                {"domain": domain, "embedder": embedder, "ratio": "ray / local docs/s", "per_stage": per}
            )
    lines = [
        f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
        f"load average at start {info['load_avg_1m_at_start']}, at end {round(os.getloadavg()[0], 2)}",
        f"Ray start (once, before the runs): {ray_start_s:.1f} s; ray engine: {args.actors} embedding actors",
        "",
        f"docs/s per stage, median of {args.repeats} fresh builds (higher is better)",
        f"{'domain':<10} {'embedder':<9} {'engine':<6} {'docs':>6} "
        + " ".join(f"{s:>11}" for s in ENGINE_STAGES),
    ]
    for r in rows:
        cells = " ".join(f"{(r['docs_per_s'][s] or 0):>11,.0f}" for s in ENGINE_STAGES)
        lines.append(f"{r['domain']:<10} {r['embedder']:<9} {r['engine']:<6} {r['docs']:>6} {cells}")
    lines += ["", "ratio ray / local of docs/s (>1: ray is faster)"]
    for q in ratios:
        cells = " ".join(f"{(q['per_stage'][s] or 0):>11.2f}" for s in ENGINE_STAGES)
        lines.append(f"{q['domain']:<10} {q['embedder']:<9} {'':<6} {'':>6} {cells}")
    print("\n".join(lines))
    out = Path(args.out) if args.out != str(DEFAULT_OUT) else ENGINES_OUT
    payload = {"machine": info, "quick": args.quick, "ray_start_s": round(ray_start_s, 2), "load_avg_1m_at_end": os.getloadavg()[0],
               "runs": rows, "ratios": ratios}  # fmt: skip
    print(f"\nwrote {write_results(out, payload)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Index build throughput (docs/s per stage) with the hashing embedder at two sizes and MiniLM.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (1k/5k hashing, 300 MiniLM): a smoke run"
    )
    parser.add_argument("--domains", help="comma-separated domains (default: all; ecommerce with --engines)")
    parser.add_argument("--small", type=int, help="hashing corpus size (default 5000; quick 1000)")
    parser.add_argument("--large", type=int, help="larger hashing corpus size (default 100000; quick 5000)")
    parser.add_argument("--minilm", type=int, help="MiniLM corpus size (default 5000; quick 300; 0 skips)")
    parser.add_argument("--batch-rows", type=int, default=2000, help="rows per build chunk (default 2000)")
    parser.add_argument("--workspace", help="workspace directory (default: a fresh temporary one)")
    parser.add_argument(
        "--out", default=str(DEFAULT_OUT), help=f"JSON output (default {DEFAULT_OUT.relative_to(ROOT)})"
    )
    engines = parser.add_argument_group("engines", "--engines: the local and the ray build side by side")
    engines.add_argument(
        "--engines",
        action="store_true",
        help=f"compare build engines (writes {ENGINES_OUT.relative_to(ROOT)})",
    )
    engines.add_argument("--engine-docs", type=int, help="corpus size (default 5000; quick 1000)")
    engines.add_argument(
        "--embedders", default="hashing,minilm", help="comma-separated embedders (default hashing,minilm)"
    )
    engines.add_argument(
        "--actors", type=int, default=2, help="embedding actors of the ray engine (default 2)"
    )
    engines.add_argument(
        "--repeats", type=int, default=3, help="fresh builds per engine; medians are reported (default 3)"
    )
    args = parser.parse_args(argv)
    info = machine()
    if args.engines:
        domains = [schema_for(d).domain for d in (args.domains or "ecommerce").split(",") if d]
        return compare_engines(args, domains, info)
    small = args.small or (1000 if args.quick else 5000)
    large = args.large or (5000 if args.quick else 100_000)
    neural = args.minilm if args.minilm is not None else (300 if args.quick else 5000)
    domains = [schema_for(d).domain for d in (args.domains or ",".join(DOMAINS)).split(",") if d]
    runs = [Run("hashing", small), Run("hashing", large), Run("minilm", neural)]
    workspace = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="prore-bench-"))
    cfg = Config(workspace=workspace, clickhouse=ClickHouseConfig(chdb_path=str(workspace / "chdb")))
    rows = []
    for domain in domains:
        for run in runs:
            if run.docs <= 0:
                continue
            print(f"... {domain} {run.label}", file=sys.stderr, flush=True)
            rows.append(run_one(cfg, domain, run, args.batch_rows))
    rats = ratios(rows, runs)
    print(table(rows, rats, info))
    out = write_results(args.out, {"machine": info, "quick": args.quick, "runs": rows, "ratios": rats})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
