"""What keeping freed memory (:mod:`core.memory`) does to `prore`'s batch commands, side by side in one run.

Each workload runs as the `prore` command a user types, in a fresh process, with ``PRORE_KEEP_FREED_MEMORY=0``
(glibc's defaults: large freed buffers go back to the kernel) and ``=1`` (the default: kept for reuse),
alternating which goes first in each repeat. For each run: wall seconds, CPU seconds (user + system, the
process and everything it waited for, from ``wait4``), minor page faults, and peak resident memory. The
table gives medians and the kept/returned ratio.

Workloads (all on a temporary workspace made first, 600 generated products indexed with MiniLM and a small
benchmark of them; none of this setup is timed):

- ``sft``: ``prore train sft --size xs --profile short`` for ``--steps`` steps (the decoder planner, TRL);
- ``seq2seq``: the same with ``--arch minilm-seq2seq`` (MiniLM's frozen encoder and a small decoder);
- ``index``: ``prore index build`` of the 600 products with MiniLM, in a fresh workspace each run.

    python bench/memory.py [--steps 40] [--repeat 3] [--workloads sft,seq2seq,index]

Prints a table; writes ``bench/results/memory.json``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import RESULTS, machine, run_main, run_prore, two_candidates, write_results

DEFAULT_OUT = RESULTS / "memory.json"
MODES = {"returned": "0", "kept": "1"}


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    run_prore(ws, "corpus", "build", "ecommerce", "--size", "600", "--seed", "0")
    run_prore(ws, "--embedder", "minilm", "index", "build", "ecommerce")
    run_prore(
        ws,
        "--embedder",
        "minilm",
        "bench",
        "synth",
        "ecommerce",
        "--train",
        "400",
        "--test",
        "20",
        "--ood",
        "20",
    )
    return ws


def _command(workload: str, steps: int, run: Path) -> tuple[Path | None, list[str]]:
    """The workspace (None: the shared one) and the arguments of one timed run of ``workload``."""
    sft = ["train", "sft", "--domain", "ecommerce", "--size", "xs", "--profile", "short",
           "--max-steps", str(steps), "--eval-steps", str(steps), "--out", str(run)]  # fmt: skip
    if workload == "sft":
        return None, sft
    if workload == "seq2seq":
        return None, [*sft, "--arch", "minilm-seq2seq"]
    # an index build skips a corpus it has already indexed: each run builds a fresh workspace's
    run_prore(run, "corpus", "build", "ecommerce", "--size", "600", "--seed", "0")
    return run, ["--embedder", "minilm", "index", "build", "ecommerce", "--no-progress"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps of the sft and seq2seq workloads")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each workload in each mode")
    ap.add_argument("--workloads", default="sft,seq2seq,index", help="comma-separated: sft, seq2seq, index")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not chosen or set(chosen) - {"sft", "seq2seq", "index"}:
        ap.error(f"--workloads: {args.workloads!r} is not a list of sft, seq2seq, index")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {w: {m: [] for m in MODES} for w in chosen}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        root = Path(tmp)
        print("making the workspace (600 products, MiniLM, a small benchmark) ...", flush=True)
        ws = _workspace(root)
        for rep in range(args.repeat):
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for workload in chosen:
                for mode in order:
                    run = root / f"run-{workload}-{mode}-{rep}"  # a fresh run directory: nothing resumes
                    where, cmd = _command(workload, args.steps, run)
                    got = run_prore(where or ws, *cmd, env={"PRORE_KEEP_FREED_MEMORY": MODES[mode]})
                    runs[workload][mode].append(got)
                    print(f"  {workload:8} {mode:8} rep {rep}: {got['wall_s']:6.1f} s wall, {got['cpu_s']:6.1f} s CPU, "
                          f"{got['minor_faults'] / 1e6:5.2f}M faults, {got['peak_rss_mb']:6.0f} MB peak", flush=True)  # fmt: skip
    print(f"\nmedians of {args.repeat} runs ({args.steps} training steps)")
    summary = two_candidates(
        runs, ("returned", "kept"), ("wall_s", "cpu_s", "system_s", "minor_faults", "peak_rss_mb")
    )
    load = os.getloadavg()[0]
    path = write_results(args.out, {"machine": machine(), "load_1m_at_end": load, "steps": args.steps,
                                    "repeat": args.repeat, "summary": summary, "runs": runs})  # fmt: skip
    print(f"load at the end {load:.1f}; wrote {path}")


if __name__ == "__main__":
    run_main(main)
