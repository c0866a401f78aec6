"""How OpenMP's idle threads wait, when a trainer shares the cores: side by side in one run.

PyTorch's CPU kernels run on GNU OpenMP (libgomp). Between parallel regions its threads spin for a while before
they sleep (``OMP_WAIT_POLICY`` unset: about 300,000 spins), which costs nothing on cores of their own and a great
deal on cores another process needs: the spinning thread holds the core that process is waiting for. ``make
test`` and ``.ci/run`` run two pytest workers, the verl suite and lint on 2 cores, with trainers, vLLM's engine
and Ray's workers inside them, so this is the common case there.

The workload is a training step of the project's ``t`` planner (Qwen3, :data:`rl.train.model.SIZES`, a
4,096-token vocabulary, a batch of 16 sequences of 72 tokens: the demo's SFT batch), forward, backward and
AdamW, for ``--steps`` steps in a fresh process. Each candidate's environment is given to that process:

- ``spin``: libgomp's default;
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep as soon as a region ends);
- ``spin-1000``: ``GOMP_SPINCOUNT=1000`` (a short spin, then sleep);
- ``one-thread``: ``OMP_NUM_THREADS=1`` (no second thread to wait).

Under three loads: ``alone``; ``two trainers`` (two copies at once, as two pytest workers training); ``beside
2 busy`` (two pure-Python busy loops beside it, which use no OpenMP, as a test's server or a lint). For each,
the trainers' wall seconds and CPU seconds (medians over ``--repeat`` runs, candidates alternating), and the
ratio to ``spin``'s.

    python bench/omp_wait.py [--steps 30] [--repeat 3] [--candidates spin,passive,spin-1000,one-thread]

Prints a table; writes ``bench/results/omp_wait.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import RESULTS, machine, run_main, write_results

DEFAULT_OUT = RESULTS / "omp_wait.json"
CANDIDATES: dict[str, dict[str, str]] = {
    "spin": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin-1000": {"GOMP_SPINCOUNT": "1000"},
    "one-thread": {"OMP_NUM_THREADS": "1"},
}
LOADS = ("alone", "two trainers", "beside 2 busy")
BUSY = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
OPENMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class _Vocab:
    """What :func:`rl.train.model.qwen3_config` reads of a tokenizer."""

    bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

    def __len__(self) -> int:
        return 4096


def worker(steps: int) -> None:
    """Train the ``t`` planner for ``steps`` steps on random tokens; print its wall and CPU seconds as JSON."""
    import torch

    from rl.train.model import SIZES, build_model

    model = build_model(SIZES["t"], _Vocab(), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, 4096, (16, 72), generator=torch.Generator().manual_seed(0))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
        opt.zero_grad()
    print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                      "threads": torch.get_num_threads()}))  # fmt: skip


def _trainers(candidate: str, load: str, steps: int) -> list[dict[str, float]]:
    """One run of ``load``: the trainers' measurements (two under ``two trainers``)."""
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARS} | CANDIDATES[candidate]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(steps)]
    busy = [
        subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if load == "beside 2 busy" else 0)
    ]
    try:
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
                 for _ in range(2 if load == "two trainers" else 1)]  # fmt: skip
        outs = [p.communicate(timeout=1800)[0] for p in procs]
    finally:
        for b in busy:
            b.kill()
            b.wait()
    if any(p.returncode for p in procs):
        raise SystemExit(f"a trainer failed under {candidate} / {load}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--steps", type=int, default=30, help="training steps per trainer (default 30)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per candidate and load (default 3)")
    parser.add_argument(
        "--candidates", default=",".join(CANDIDATES), help="comma-separated, from: " + ", ".join(CANDIDATES)
    )
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated, from: " + ", ".join(LOADS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results JSON (default {DEFAULT_OUT})")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return 0
    candidates = [c for c in args.candidates.split(",") if c]
    loads = [x for x in args.loads.split(",") if x]
    unknown = sorted(set(candidates) - set(CANDIDATES)) + sorted(set(loads) - set(LOADS))
    if unknown or "spin" not in candidates:
        parser.error(
            f"unknown candidates or loads {unknown}" if unknown else "the candidates must include spin"
        )
    runs: dict[str, dict[str, list[dict[str, float]]]] = {x: {c: [] for c in candidates} for x in loads}
    for r in range(args.repeat):
        for load in loads:
            order = candidates if r % 2 == 0 else candidates[::-1]
            for c in order:
                runs[load][c] += _trainers(c, load, args.steps)
                last = runs[load][c][-1]
                print(f"repeat {r + 1}/{args.repeat} {load:>14} {c:>10}: {last['wall_s']:6.1f} s wall "
                      f"{last['cpu_s']:6.1f} s CPU", file=sys.stderr, flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    for load in loads:
        base = {m: statistics.median(x[m] for x in runs[load]["spin"]) for m in ("wall_s", "cpu_s")}
        for c in candidates:
            med = {m: statistics.median(x[m] for x in runs[load][c]) for m in ("wall_s", "cpu_s")}
            rows.append({"load": load, "candidate": c, "env": CANDIDATES[c], **med,
                         "wall_ratio": med["wall_s"] / base["wall_s"], "cpu_ratio": med["cpu_s"] / base["cpu_s"],
                         "runs": runs[load][c]})  # fmt: skip
    print(f"\n{'load':>14} {'candidate':>10} {'wall s':>8} {'CPU s':>8} {'wall x':>7} {'CPU x':>7}")
    for row in rows:
        print(f"{row['load']:>14} {row['candidate']:>10} {row['wall_s']:8.1f} {row['cpu_s']:8.1f} "
              f"{row['wall_ratio']:7.2f} {row['cpu_ratio']:7.2f}")  # fmt: skip
    write_results(args.out, {"machine": machine(), "steps": args.steps, "repeat": args.repeat, "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
