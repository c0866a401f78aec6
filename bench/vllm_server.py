"""vLLM's CPU server with the model in a worker process of its own, or in the engine core: side by side.

On CPU, vLLM 0.32 runs three processes for one model: the API server, the engine core, and (its CPU platform
forces the multiprocess executor while ``VLLM_ENABLE_V1_MULTIPROCESSING=1``, vLLM's default) a worker process
that holds the model. Each imports torch and vLLM, which on 2 cores is most of a start. With
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` the CPU platform keeps vLLM's one-process executor (``uni``): the server
still runs its engine core in a process of its own, and the model runs in it.

- ``mp``: vLLM's default (API server, engine core, worker);
- ``uni``: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (API server, engine core with the model in it).

For each candidate, in alternating order, ``--repeat`` times: the README's server command (Serving, shell 1:
``--dtype float32 --enforce-eager --max-model-len 4096 --gpu-memory-utilization 0.1`` on llguidance) started on
``--planner``, the seconds until ``/v1/models`` answers and the CPU seconds of its processes by then; with
``--workspace``, then ``prore eval DOMAIN --method planner-served:...`` for each ``--domains`` (the served
planner evaluated as ``prore serve`` asks it): its wall seconds and the server's CPU seconds during it. Each
evaluation's rankings must be the same under both candidates (greedy decoding, the same prompts): the script
says how many are, per domain.

    python bench/vllm_server.py --planner WS/runs/sft-both/final [--workspace WS --domains ecommerce,email]
        [--repeat 2] [--config scripts/demo.yaml]

Prints a table of medians with the ratio ``uni/mp``; writes ``bench/results/vllm_server.json``. The workspace
is only read (the evaluations' reports go to a copy of it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from common import PRORE, RESULTS, machine, run_main, run_prore, two_candidates, write_results

CANDIDATES = {"mp": {}, "uni": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}
"""Each candidate's environment for the server, over vLLM's defaults."""


def server_argv(model: Path, port: int) -> list[str]:
    """The README's vLLM command (Serving, shell 1) on ``model`` and ``port``."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", "planner", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--enforce-eager", "--max-model-len", "4096", "--gpu-memory-utilization", "0.1",
            "--structured-outputs-config.backend", "guidance"]  # fmt: skip


def tree_cpu(proc: psutil.Process) -> float:
    """User and system CPU seconds of ``proc`` and every process below it that still runs."""
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def one_run(name: str, args: argparse.Namespace, workspace: Path | None, log: Path) -> dict[str, Any]:
    """Start the server as ``name`` says, time it to ready, run the evaluations (with a workspace), stop it
    with every process it started (:func:`core.processes.served`)."""
    from core.processes import served
    from indexing.stores.server import free_port

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", **CANDIDATES[name]}
    url = f"http://127.0.0.1:{port}/v1"
    start = time.perf_counter()
    with served(server_argv(args.planner, port), url + "/models", log, what=f"the {name} vLLM server",
                timeout_s=600, poll_s=0.25, env=env) as server:  # fmt: skip
        proc = psutil.Process(server.pid)
        run: dict[str, Any] = {"ready_s": time.perf_counter() - start, "start_cpu_s": tree_cpu(proc),
                               "processes": 1 + len(proc.children(recursive=True))}  # fmt: skip
        if workspace is not None:
            run.update(evaluations(args, workspace, url, proc))
        return run


def evaluations(args: argparse.Namespace, workspace: Path, url: str, proc: psutil.Process) -> dict[str, Any]:
    """``prore eval`` of each domain's test split against the server at ``url``: its wall seconds, the server's
    CPU seconds during it, and each request's ranking."""
    method = f"planner-served:{args.planner}?url={url}&model=planner"
    out: dict[str, Any] = {}
    for domain in args.domains:
        before = tree_cpu(proc)
        got = run_prore(
            workspace, "--config", str(args.config), "eval", domain, "--method", method, "--quiet"
        )
        out[f"{domain}_eval_s"] = got["wall_s"]
        out[f"{domain}_server_cpu_s"] = tree_cpu(proc) - before
        out[f"{domain}_ids"] = latest_ids(workspace, domain)
    return out


def latest_ids(workspace: Path, domain: str) -> dict[str, list[str]]:
    """The newest served evaluation's ranking of each request."""
    runs = (workspace / "reports" / "eval" / domain / "test").glob("planner-served:*/*")
    run = max(runs, key=lambda p: p.name)  # named by the time it started
    rows = (json.loads(line) for line in (run / "queries.jsonl").read_text().splitlines())
    return {r["qid"]: r["ids"] for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planner", type=Path, required=True, help="the planner's model directory (its final/)")
    ap.add_argument(
        "--workspace", type=Path, help="a workspace to evaluate the served planner on (read only)"
    )
    ap.add_argument("--domains", type=lambda s: s.split(","), default=["ecommerce", "email"])
    ap.add_argument("--config", type=Path, default=Path("scripts/demo.yaml"), help="prore's --config")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "vllm_server.json")
    args = ap.parse_args()
    if not Path(PRORE).exists():
        raise SystemExit(f"no prore at {PRORE}: make setup")
    with tempfile.TemporaryDirectory(prefix="vllm-server-bench-") as tmp:
        workspace = None
        if args.workspace:
            workspace = Path(tmp) / "workspace"
            shutil.copytree(args.workspace, workspace, symlinks=True)  # chDB's relative links stay links
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in CANDIDATES}
        for i in range(args.repeat):
            for name in CANDIDATES if i % 2 == 0 else reversed(CANDIDATES):
                got = one_run(name, args, workspace, Path(tmp) / f"{name}-{i}.log")
                print(f"{name} run {i + 1}: ready in {got['ready_s']:.1f} s, {got['start_cpu_s']:.1f} CPU s",
                      flush=True)  # fmt: skip
                runs[name].append(got)
    metrics = ["ready_s", "start_cpu_s"] + [f"{d}_{m}" for d in (args.domains if workspace else ())
                                            for m in ("eval_s", "server_cpu_s")]  # fmt: skip
    summary = two_candidates({"server": runs}, ("mp", "uni"), metrics)["server"]
    same = {}
    for d in args.domains if workspace else ():
        a, b = runs["mp"][0][f"{d}_ids"], runs["uni"][0][f"{d}_ids"]
        same[d] = f"{sum(a[q] == b.get(q) for q in a)} of {len(a)}"
        print(f"{d}: the same ranking under both for {same[d]} requests")
    for r in (*runs["mp"], *runs["uni"]):
        for d in args.domains:
            r.pop(f"{d}_ids", None)
    write_results(args.out, {"machine": machine(), "planner": str(args.planner), "summary": summary,
                             "same_rankings": same, "runs": runs})  # fmt: skip
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
