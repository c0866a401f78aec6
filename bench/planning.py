"""Filter pushdown, adaptive K and conditional conjunctions against the oracle: what each planning
option does to gold programs.

The rule for ``serving.planning``'s defaults is that an option is on by default only if the oracle
(every benchmark instance's gold program run again, ``prore eval --method oracle``) keeps Hit@1 = 1.0.
``prore eval`` stops at the first oracle mismatch, so this script runs the gold programs itself, the
same way (:meth:`serving.engine.Engine.execute_many` at the evaluation's ``k``), with seven engines side
by side on the same index (:func:`candidates`): fixed K (every pass off), pushdown, adaptive K, both,
conditional evaluation of conjunctions, conditional + pushdown, and all three. For each domain and split:

* **oracle Hit@1**: the gold program still ranks its gold document first;
* **P@1**, **P@5**, **R@10**: its first (five, ten) results are in the instance's relevant set
  (satisfy the whole request, judged on the corpus labels), as ``prore eval`` scores them
  (:func:`rl.eval.metrics.score_queries`);
* **empty**: share of programs that return nothing (a failed program counts as empty);
* **changed**: share whose first result differs from the fixed-K engine's; **widened**: share whose
  candidate lists adaptive K made longer than the program asked for;
* **ms/program**: wall time of the batch (every cache cold) per program, and its ratio to fixed K.

A benchmark's gold document is what the engine it was synthesized under ranks first, so each
candidate's oracle Hit@1 is read against that engine: ``--kept-under default`` (the default engine,
conditional + pushdown) or ``--kept-under fixed-k`` (the paper's). The workspace (default
``bench/results/workspace-planning-MODE``) is prepared on first use with the ``prore`` commands of
``scripts/demo.sh`` at the demo's corpus sizes (3,000 products, 5,000 emails; ``--quick``: 1,000 and 1,500),
the hashing embedder unless ``--embedder`` says otherwise, and demo-size benchmarks; a rerun reuses it. Prints a table; writes
``bench/results/planning.json``.

    .venv/bin/python bench/planning.py
    .venv/bin/python bench/planning.py --kept-under fixed-k
    .venv/bin/python bench/planning.py --embedder minilm-onnx --splits test
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, machine, run_main, write_results

from core.errors import ProReError
from indexing.config import load_config
from indexing.workspace import Workspace
from rl.datasets.store import load_split
from rl.eval.metrics import Relevant, score_queries
from serving.dsl import parse_program
from serving.engine import Engine
from serving.settings import PLANNING_MODES, PlanningOptions, ServingSettings

DEFAULT_OUT = RESULTS / "planning.json"
WORKSPACES = RESULTS / "workspace-planning-{}"
"""Where each ``--kept-under`` mode's corpora, indexes and benchmarks are prepared (unless ``--workspace``)."""
PRORE = str(ROOT / ".venv" / "bin" / "prore")
SIZES = {"ecommerce": 3000, "email": 5000}
QUICK_SIZES = {"ecommerce": 1000, "email": 1500}
BENCH = {
    "ecommerce": {"train": 50, "test": 300, "ood": 150},
    # With hashing vectors few paraphrased (OOD) email requests rank their gold first: a small split.
    "email": {"train": 50, "test": 300, "ood": 12},
}
QUICK_BENCH = {"train": 20, "test": 100, "ood": 10}


def candidates(adaptive_k_max: int) -> dict[str, PlanningOptions]:
    """The engines compared, by name."""
    return {
        "fixed K": PlanningOptions.fixed_k(),
        "pushdown": PlanningOptions(pushdown=True, conditional=False),
        "adaptive K": PlanningOptions(
            pushdown=False, conditional=False, adaptive_k=True, adaptive_k_max=adaptive_k_max
        ),
        "both": PlanningOptions(
            pushdown=True, conditional=False, adaptive_k=True, adaptive_k_max=adaptive_k_max
        ),
        "conditional": PlanningOptions(pushdown=False, conditional=True),
        "conditional + pushdown (the default)": PlanningOptions(conditional=True, pushdown=True),
        "all three": PlanningOptions(
            conditional=True, pushdown=True, adaptive_k=True, adaptive_k_max=adaptive_k_max
        ),
    }


def prepare(workspace: Path, embedder: str, domain: str, *, quick: bool, kept_under: str) -> None:
    """Corpus, index and benchmark of ``domain`` with the ``prore`` commands, unless already there; the
    benchmark is synthesized by the engine of planning mode ``kept_under``."""
    ws = Workspace(workspace)
    if (ws.bench_dir(domain) / "test.parquet").is_file():
        return
    size = (QUICK_SIZES if quick else SIZES)[domain]
    bench = QUICK_BENCH if quick else BENCH[domain]
    workspace.mkdir(parents=True, exist_ok=True)
    config = workspace / "planning.yaml"
    config.write_text(f"serving:\n  planning:\n    mode: {kept_under}\n")
    base = [PRORE, "--workspace", str(workspace), "--config", str(config), "--embedder", embedder]
    steps = [
        ["corpus", "build", domain, "--size", str(size)],
        ["index", "build", domain],
        ["bench", "synth", domain, *[a for s, n in bench.items() for a in (f"--{s}", str(n))]],
    ]
    for step in steps:
        print("  $ prore " + " ".join(step), file=sys.stderr)
        subprocess.run(base + step, check=True)


def measure(
    engine: Engine, instances: Sequence[Any], k: int, baseline: list[str | None] | None
) -> dict[str, Any]:
    """One engine on one split: the gold programs as one batch, every cache cold."""
    programs = [parse_program(inst.program) for inst in instances]
    engine.clear_caches()
    start = time.perf_counter()
    outcomes = engine.execute_many(programs, k)
    wall_ms = (time.perf_counter() - start) * 1000
    rankings: list[list[str] | None] = []
    widened = 0
    for program, out in zip(programs, outcomes, strict=True):
        if isinstance(out, ProReError):
            rankings.append(None)
            continue
        rankings.append(list(out.ids))
        asked = [e.k for e in program.retrieval_list]
        widened += any(len(c) > a for c, a in zip(out.candidates.values(), asked, strict=True))
    scores = score_queries(
        rankings, [i.gold_id for i in instances], [Relevant.of(i) for i in instances], cutoff=k
    )
    graded = [s.graded for s in scores if s.graded is not None]
    firsts = [r[0] if r else None for r in rankings]
    n = len(instances)
    return {
        "n": n,
        "hit1": statistics.fmean(s.hit1 for s in scores),
        "p1": statistics.fmean(g["p@1"] for g in graded) if graded else None,
        "p5": statistics.fmean(g["p@5"] for g in graded) if graded else None,
        "r10": statistics.fmean(g["recall@10"] for g in graded) if graded else None,
        "p1_n": len(graded),
        "empty": sum(1 for r in rankings if not r) / n,
        "failed": sum(1 for r in rankings if r is None),
        "changed": None
        if baseline is None
        else sum(a != b for a, b in zip(firsts, baseline, strict=True)) / n,
        "widened": widened / n,
        "ms_per_program": wall_ms / n,
        "firsts": firsts,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": machine(),
        "k": args.k,
        "embedder": args.embedder,
        "kept_under": args.kept_under,
        "rows": [],
    }
    for domain in args.domains:
        prepare(args.workspace, args.embedder, domain, quick=args.quick, kept_under=args.kept_under)
        cfg = load_config(workspace=args.workspace, embedder=args.embedder)
        caches = cfg.section(ServingSettings).engine
        for split in args.splits:
            instances = load_split(Workspace(args.workspace), domain, split)
            baseline: list[str | None] | None = None
            base_ms = 0.0
            for name, planning in candidates(args.adaptive_k_max).items():
                # Repetitions alternate with nothing else: the median of each engine's own batches.
                reps = []
                with Engine.open(cfg, domain, caches=caches, planning=planning) as engine:
                    for _ in range(args.repeat):
                        reps.append(measure(engine, instances, args.k, baseline))
                row = reps[0]
                row["ms_per_program"] = statistics.median(r["ms_per_program"] for r in reps)
                if baseline is None:
                    baseline, base_ms = row["firsts"], row["ms_per_program"]
                row["ms_ratio"] = row["ms_per_program"] / base_ms if base_ms else None
                del row["firsts"]
                results["rows"].append({"domain": domain, "split": split, "candidate": name, **row})
                print(f"  {domain} {split} {name}: done", file=sys.stderr)
    return results


def table(results: dict[str, Any]) -> str:
    head = (
        "| domain | split | candidate | oracle Hit@1 | P@1 | P@5 | R@10 | empty | changed | widened "
        "| ms/program | ratio |"
    )
    lines = [head, "|" + "---|" * 12]

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for r in results["rows"]:
        lines.append(
            f"| {r['domain']} | {r['split']} | {r['candidate']} | {r['hit1']:.3f} | {num(r['p1'])} | "
            f"{num(r['p5'])} | {num(r['r10'])} | {r['empty']:.3f} | {num(r['changed'])} | {r['widened']:.3f} | "
            f"{r['ms_per_program']:.2f} | {r['ms_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--kept-under",
        choices=PLANNING_MODES,
        default="default",
        help="planning mode the benchmarks are synthesized under (default: the default engine)",
    )
    parser.add_argument("--workspace", type=Path, help="default bench/results/workspace-planning-MODE")
    parser.add_argument(
        "--embedder", default="hashing", help="embedder of a workspace built here (default hashing)"
    )
    parser.add_argument("--domains", type=lambda s: s.split(","), default=["ecommerce", "email"])
    parser.add_argument("--splits", type=lambda s: s.split(","), default=["test", "ood"])
    parser.add_argument("--k", type=int, default=20, help="ranked ids per program (prore eval's default k)")
    parser.add_argument("--adaptive-k-max", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="batches per engine; the median time is kept")
    parser.add_argument("--quick", action="store_true", help="small corpora and benchmarks (a smoke run)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.workspace = args.workspace or Path(str(WORKSPACES).format(args.kept_under))
    results = run(args)
    print(f"machine: {results['machine']}")
    print(
        f"embedder {args.embedder}, k {args.k}, adaptive_k_max {args.adaptive_k_max}, "
        f"benchmarks kept under {args.kept_under}"
    )
    print(table(results))
    print(f"wrote {write_results(args.out, results)}")
    return 0


if __name__ == "__main__":
    run_main(main)
