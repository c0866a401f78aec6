"""Scaling: build time, memory, latency and answer quality from 5k to 1M products on the Milvus server.

For each embedder and corpus size (default 5k, 50k, 200k and 1M products; ``--sizes``, ``--embedders``):

1. **Build.** The seeded corpus with its label table (what ``prore corpus build ecommerce --size N``
   writes), then the index (``prore index build``) on a local Milvus standalone server (``prore stores
   up``; one server per size, in that size's workspace, running only while that size is built and
   measured) with HNSW. Seconds per stage: corpus generation, ClickHouse load, embedding, Milvus insert +
   index build (upserts, flush and the wait until every row is indexed) and BM25; peak resident memory
   of the benchmark process and of the Milvus server, per phase (sampled with psutil).
2. **Benchmark.** One benchmark (``prore bench synth``: gold programs, relevant sets from the corpus
   labels) is synthesized on the smallest size of each embedder and run unchanged at every larger size.
   A generated product never changes when the corpus grows (it is derived from the seed and its
   position), so each instance's gold document is in every larger corpus and satisfies its request
   there too: every instance has an answer at every size, and a program that returns nothing missed.
3. **Measure, per planning candidate** (:data:`CANDIDATES`: fixed K=20, filter pushdown, adaptive K,
   both, conditional evaluation of conjunctions alone, with pushdown, and with both; a candidate runs
   only when ``serving.planning`` has its options, see :func:`available_candidates`):

   * latency p50 / p95 per level (L1 / L2 / L3 programs of the benchmark), one program at a time with
     every cache cold (as ``bench/engine.py``), and the median of each engine stage;
   * the share of benchmark programs that return nothing (a failed program counts, and is also
     counted apart), and P@1: the first result satisfies the whole request, judged on that size's
     corpus labels with the relevant-set conditions of :mod:`rl.datasets.relevance` (exactly, with no cap
     on the stored relevant ids).

Neural embedders (``minilm-onnx``, ``minilm-onnx-int8``, ``minilm``) first measure their embedding
throughput on this machine and keep the sizes whose estimated embedding time, summed over the sizes
still to build, fits ``--neural-budget-min`` (default 60 minutes). ``--max-minutes`` skips a size whose
estimated build (scaled from the last size built) would not finish in the time left; sizes not built get
a power-law extrapolation of each build stage from the sizes that were.

Corpora, indexes and benchmarks are kept in the workspace (default ``bench/results/workspace-scale``)
and reused: a rerun skips what is built and resumes an interrupted index build. Prints a table, writes
``bench/results/scale.json`` and PNG curves ``bench/results/scale_{build,latency,quality}.png``;
ratios compare each size with the smallest one. ``--quick`` is a smoke run (2k and 10k products,
hashing embedder, a small benchmark).

    .venv/bin/python bench/scale.py --quick
    .venv/bin/python bench/scale.py --sizes 5k,50k,200k,1M --embedders hashing,minilm-onnx-int8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import RESULTS, machine, run_main

from rl.eval.scale.estimates import embed_rate, estimate_build_s, pick_neural_sizes
from rl.eval.scale.report import finish, table
from rl.eval.scale.runs import (
    BUILD_FILE,
    CANDIDATES,
    RESULT_FILE,
    K,
    Run,
    available_candidates,
    log,
    parse_sizes,
    planning_options,
    size_label,
)
from rl.eval.scale.worker import Options, worker
from serving.settings import PLANNING_MODES

DEFAULT_SIZES = (5_000, 50_000, 200_000, 1_000_000)
QUICK_SIZES = (2_000, 10_000)
DEFAULT_EMBEDDERS = ("hashing", "minilm-onnx-int8")
NEURAL = ("minilm", "minilm-onnx", "minilm-onnx-int8")
DEFAULT_OUT = RESULTS / "scale.json"
DEFAULT_WORKSPACE = RESULTS / "workspace-scale"


def spawn(run: Run, args: argparse.Namespace, bench_from: Path | None, root: Path) -> int:
    """Run one (embedder, size) in a child process; its exit status. Stops it and its server on exit.

    The child stays in this process group and writes to this terminal: Ctrl-C reaches both."""
    from core import processes
    from indexing.stores import server

    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--worker",
        "--embedder", run.embedder, "--docs", str(run.docs), "--run-workspace", str(run.workspace(root)),
        "--test", str(args.test), "--per-level", str(args.per_level), "--candidates", args.candidates_run,
        "--hnsw-m", str(args.hnsw_m), "--hnsw-ef-construction", str(args.hnsw_ef_construction), "--ef", str(args.ef),
        "--kept-under", args.kept_under,
    ]  # fmt: skip
    if bench_from is not None:
        cmd += ["--bench-from", str(bench_from)]
    if args.keep_server:
        cmd.append("--keep-server")
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    finally:
        processes.stop(proc, grace_s=60)
        if not args.keep_server:
            server.stop(server.server_dir(run.workspace(root)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", help="comma list of corpus sizes (default 5k,50k,200k,1M; quick 2k,10k)")
    parser.add_argument(
        "--embedders", help=f"comma list (default {','.join(DEFAULT_EMBEDDERS)}; quick hashing)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2k and 10k products, hashing, small benchmark"
    )
    parser.add_argument(
        "--workspace", type=Path, default=DEFAULT_WORKSPACE, help="where runs are built and kept"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON results, PNGs beside it (default bench/results/scale.json; quick scale_quick.json)",
    )
    parser.add_argument("--test", type=int, help="benchmark test instances (default 300; quick 60)")
    parser.add_argument("--per-level", type=int, help="programs per level for latency (default 40; quick 10)")
    parser.add_argument(
        "--candidates", default=",".join(c.name for c in CANDIDATES),
        help="planning candidates to compare (default all; each runs once the engine has its options)",
    )  # fmt: skip
    parser.add_argument(
        "--neural-budget-min", type=float, default=60.0,
        help="minutes of embedding a neural embedder may spend over its sizes (default 60)",
    )  # fmt: skip
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="skip a size whose estimated build would not finish in the time left",
    )
    parser.add_argument("--hnsw-m", type=int, default=16, help="HNSW M (default 16)")
    parser.add_argument(
        "--hnsw-ef-construction", type=int, default=128, help="HNSW efConstruction (default 128)"
    )
    parser.add_argument("--ef", type=int, default=64, help="HNSW search ef, raised to k (default 64)")
    parser.add_argument("--keep-server", action="store_true", help="leave each size's Milvus server running")
    parser.add_argument(
        "--report", action="store_true", help="only redo ratios, goals, table and plots from the --out JSON"
    )
    parser.add_argument(
        "--kept-under",
        choices=PLANNING_MODES,
        default="default",
        help="planning mode the benchmark is synthesized under (default: the default engine; fixed-k: the paper's)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--embedder", help=argparse.SUPPRESS)
    parser.add_argument("--docs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-workspace", help=argparse.SUPPRESS)
    parser.add_argument("--bench-from", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out = args.out or (DEFAULT_OUT.with_name("scale_quick.json") if args.quick else DEFAULT_OUT)
    args.test = args.test or (60 if args.quick else 300)
    args.per_level = args.per_level or (10 if args.quick else 40)
    if args.worker:
        from indexing.index import exit_process

        code = 1
        options = Options(test=args.test, per_level=args.per_level, candidates=tuple(args.candidates.split(",")),
                          hnsw_m=args.hnsw_m, hnsw_ef_construction=args.hnsw_ef_construction, ef=args.ef,
                          keep_server=args.keep_server, kept_under=args.kept_under)  # fmt: skip
        try:
            code = worker(Run(args.embedder, args.docs), Path(args.run_workspace), options,
                          Path(args.bench_from) if args.bench_from else None)  # fmt: skip
        except BaseException:
            # exit_process() ends the process at once: say why first, or the parent sees only the status.
            traceback.print_exc()
            raise
        finally:
            exit_process(code)  # chDB may abort in its destructors at interpreter exit
    if args.report:
        if not args.out.is_file():
            raise SystemExit(f"error usage: --report reads {args.out}, which does not exist")
        results = json.loads(args.out.read_text())
        finish(results, args.out)
        print(table(results))
        print(f"wrote {args.out}")
        return 0
    return orchestrate(args)


def orchestrate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    sizes = parse_sizes(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    embedders = [
        e
        for e in (args.embedders or ("hashing" if args.quick else ",".join(DEFAULT_EMBEDDERS))).split(",")
        if e
    ]
    from indexing.embedders.registry import EMBEDDERS

    for e in embedders:
        EMBEDDERS.get(e)  # an unknown name fails here, with the known ones
    candidates, missing = available_candidates([c for c in args.candidates.split(",") if c])
    args.candidates_run = ",".join(c.name for c in candidates)
    for name, why in missing.items():
        log(f"candidate {name} left out: {why}")
    root: Path = args.workspace
    root.mkdir(parents=True, exist_ok=True)
    info = machine()
    _, planning_defaults = planning_options()
    results: dict[str, Any] = {
        "machine": info,
        "quick": args.quick,
        "sizes": list(sizes),
        "embedders": embedders,
        "candidates": {c.name: {"label": c.label, "planning": dict(c.planning)} for c in candidates},
        "candidates_left_out": missing,
        "planning_defaults": planning_defaults,
        "hnsw": {"M": args.hnsw_m, "efConstruction": args.hnsw_ef_construction, "ef": args.ef},
        "k": K,
        "kept_under": args.kept_under,
        "neural": {},
        "runs": [],
        "skipped": [],
    }

    plan: list[Run] = []
    for e in embedders:
        wanted = list(sizes)
        if e in NEURAL:
            log(f"{e}: measuring embedding throughput")
            rate = embed_rate(e)
            budget = args.neural_budget_min * 60

            def built(n: int, e: str = e) -> bool:
                return (Run(e, n).workspace(root) / BUILD_FILE).is_file() and "total" in json.loads(
                    (Run(e, n).workspace(root) / BUILD_FILE).read_text()
                ).get("seconds", {})

            keep, estimate = pick_neural_sizes(sizes, rate, budget, built)
            results["neural"][e] = {
                "products_per_s": round(rate, 2),
                "budget_min": args.neural_budget_min,
                "estimated_embed_s": estimate,
                "sizes": keep,
            }
            log(
                f"{e}: {rate:.1f} products/s; within {args.neural_budget_min:.0f} min of embedding: "
                f"{', '.join(size_label(n) for n in keep) or 'none'} "
                f"(estimates: {', '.join(f'{k} {v / 60:.0f} min' for k, v in estimate.items())})"
            )
            for n in sizes:
                if n not in keep:
                    results["skipped"].append({"label": Run(e, n).label, "embedder": e, "docs": n,
                                               "why": "embedding would not fit the neural budget"})  # fmt: skip
            wanted = keep
        plan += [Run(e, n) for n in wanted]
    plan.sort(key=lambda r: (r.docs, embedders.index(r.embedder)))
    bench_from: dict[str, Path] = {}
    done: dict[str, list[dict[str, Any]]] = {e: [] for e in embedders}
    failed: set[str] = set()
    try:
        for run in plan:
            if run.embedder in failed:
                results["skipped"].append({"label": run.label, "embedder": run.embedder, "docs": run.docs,
                                           "why": "a smaller size of this embedder failed"})  # fmt: skip
                continue
            build_estimate = estimate_build_s(done[run.embedder], run.docs)
            if args.max_minutes is not None and build_estimate is not None:
                left = args.max_minutes * 60 - (time.monotonic() - started)
                if build_estimate > left:
                    log(
                        f"{run.label}: skipped, estimated build {build_estimate / 60:.0f} min > {left / 60:.0f} min left"
                    )
                    results["skipped"].append({"label": run.label, "embedder": run.embedder, "docs": run.docs,
                                               "why": f"estimated build {build_estimate:.0f} s > {left:.0f} s left"})  # fmt: skip
                    continue
            log(
                f"== {run.label}"
                + (f" (estimated build {build_estimate / 60:.1f} min)" if build_estimate else "")
            )
            code = spawn(run, args, bench_from.get(run.embedder), root)
            result_file = run.workspace(root) / RESULT_FILE
            if code != 0 or not result_file.is_file():
                log(f"{run.label}: failed with exit status {code}")
                failed.add(run.embedder)
                results["skipped"].append({"label": run.label, "embedder": run.embedder, "docs": run.docs,
                                           "why": f"the run failed (exit status {code})"})  # fmt: skip
                continue
            result = json.loads(result_file.read_text())
            result["estimated_build_s"] = round(build_estimate, 1) if build_estimate else None
            results["runs"].append(result)
            done[run.embedder].append(result)
            bench_from.setdefault(run.embedder, run.workspace(root))
            finish(results, args.out)  # partial results survive an interruption
    except (KeyboardInterrupt, SystemExit):
        log("interrupted; writing what was measured")
    finish(results, args.out)
    print(table(results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
