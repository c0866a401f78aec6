"""MiniLM on torch against MiniLM on ONNX Runtime (``embedder.minilm_backend``), as a user's `prore` commands
pay for it, side by side in one run.

Each timed run is the `prore` command a user types, in a fresh process, with a config file that names the
backend; the candidates alternate which goes first in each repeat. ``auto``, the default, is ``onnx`` on a
machine with the ``onnx`` extra (this one, if ``make setup`` made its environment) and ``torch`` elsewhere.
The ONNX graph is exported before the first timed run (once per machine, into ``PRORE_CACHE_DIR``), as on any
machine after its first use. Workloads:

- ``execute``: ``prore execute`` of an L2 example program (a brand, a price and a text search) with ``--k 5``
  on 600 products indexed with MiniLM: a command that embeds one phrase;
- ``index``: ``prore index build`` of the same 600 products with MiniLM, in a fresh workspace each run.

For each run: wall and CPU seconds (the process and all it waited for) and peak resident memory; the table
gives medians and the onnx/torch ratio.

    python bench/minilm_backend.py [--repeat 3] [--workloads execute,index]

Prints a table; writes ``bench/results/minilm_backend.json``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import RESULTS, ROOT, machine, run_main, run_prore, two_candidates, write_results

DEFAULT_OUT = RESULTS / "minilm_backend.json"
BACKENDS = ("torch", "onnx")
WORKLOADS = ("execute", "index")
PROGRAM = ROOT / "examples" / "programs" / "ecommerce_L2_brand_price_text.json"
PRODUCTS = "600"


def _config(root: Path, backend: str) -> Path:
    path = root / f"{backend}.yaml"
    path.write_text(f"embedder:\n  text: minilm\n  image: minilm\n  minilm_backend: {backend}\n")
    return path


def _args(workload: str, config: Path) -> list[str]:
    if workload == "execute":
        return ["--config", str(config), "execute", "--program", str(PROGRAM), "--k", "5"]
    return ["--config", str(config), "index", "build", "ecommerce", "--no-progress"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each workload on each backend")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: execute, index")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not chosen or set(chosen) - set(WORKLOADS):
        ap.error(f"--workloads: {args.workloads!r} is not a list of {', '.join(WORKLOADS)}")
    from indexing.embedders.registry import minilm_backend

    runs: dict[str, dict[str, list[dict[str, float]]]] = {w: {b: [] for b in BACKENDS} for w in chosen}
    with tempfile.TemporaryDirectory(prefix="bench-minilm-") as tmp:
        root = Path(tmp)
        configs = {b: _config(root, b) for b in BACKENDS}
        ws = root / "ws"
        print(f"making the workspace ({PRODUCTS} products indexed with MiniLM; the ONNX graph exported) ...")
        run_prore(ws, "corpus", "build", "ecommerce", "--size", PRODUCTS, "--seed", "0")
        run_prore(ws, *_args("index", configs["onnx"]))
        for rep in range(args.repeat):
            order = list(BACKENDS) if rep % 2 == 0 else list(reversed(BACKENDS))
            for workload in chosen:
                for backend in order:
                    where = ws
                    # a build skips a corpus it has indexed: a fresh workspace each run
                    if workload == "index":
                        where = root / f"build-{backend}-{rep}"
                        run_prore(where, "corpus", "build", "ecommerce", "--size", PRODUCTS, "--seed", "0")
                    got = run_prore(where, *_args(workload, configs[backend]))
                    runs[workload][backend].append(got)
                    print(f"  {workload:8} {backend:6} rep {rep}: {got['wall_s']:6.1f} s wall, "
                          f"{got['cpu_s']:6.1f} s CPU, {got['peak_rss_mb']:6.0f} MB peak", flush=True)  # fmt: skip
    print(f"\nmedians of {args.repeat} runs; the default (auto) is {minilm_backend('auto')} here")
    summary = two_candidates(runs, BACKENDS, ("wall_s", "cpu_s", "peak_rss_mb"))
    load = os.getloadavg()[0]
    path = write_results(args.out, {"machine": machine(), "load_1m_at_end": load, "repeat": args.repeat,
                                    "default": minilm_backend("auto"), "summary": summary, "runs": runs})  # fmt: skip
    print(f"load at the end {load:.1f}; wrote {path}")


if __name__ == "__main__":
    run_main(main)
