"""What the familiarity gate saves a served search: ``prore serve`` fusing every search against fusing only the
unfamiliar ones, on the same requests and the same planner.

The planner is the README's encoder-decoder serving line: ``python -m serving.kserve_seq2seq`` over a model
directory whose card names a familiarity gate (``prore train familiarity RUN/final``), and ``prore serve
--guided-samples 8 --fuse self-query`` in front of it, once with ``--fuse-gate none`` (every search draws its
8 samples and runs the self-querying retriever) and once with ``--fuse-gate familiar`` (a familiar search runs
its program alone first, and draws samples only when that ranks nothing). One request in flight, the same
requests in the same order for both: the first ``--requests`` of each corpus's test split (the training
templates' wording, most of it familiar) and of its OOD split (mostly unfamiliar).

Prints a table of latency medians and p95 by split and by what the gate decided, with the ratio of the two
candidates, and writes ``bench/results/serve_fusion.json``. Needs a workspace with the benchmark and both
corpora indexed (``make demo PROFILE=medium``) and the planner's familiarity gate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from common import RESULTS, ROOT, machine, percentile, run_main, write_results

from core import processes
from indexing.stores.server import free_port

GATES = ("none", "familiar")
SAMPLES = 8


def model_server(model: Path, log: Path) -> Any:
    """The planner's model server (KServe ModelServer, OpenAI chat route) on free loopback ports."""
    port = free_port()
    cmd = [sys.executable, "-m", "serving.kserve_seq2seq", "--model_dir", str(model), "--model_name", "planner",
           "--http_port", str(port), "--grpc_port", str(free_port())]  # fmt: skip
    url = f"http://127.0.0.1:{port}/openai/v1"
    return url, processes.served(cmd, url + "/models", log, what="the planner's model server", timeout_s=600,
                                 cwd=ROOT)  # fmt: skip


def query_api(args: argparse.Namespace, planner_url: str, gate: str, log: Path) -> Any:
    """``prore serve`` asking the planner, with the README's fusion flags and ``--fuse-gate gate``."""
    port = free_port()
    cmd = [sys.executable, "-m", "prore", "--workspace", str(args.workspace),
           *(["--config", str(args.config)] if args.config else []),
           "serve", "--port", str(port), "--planner-url", planner_url, "--planner-card", str(args.model),
           "--planner-timeout-s", "60", "--guided-samples", str(SAMPLES), "--fuse", "self-query",
           "--fuse-gate", gate, "--log-level", "warning"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    return url, processes.served(cmd, url + "/readyz", log, what="prore serve", timeout_s=600, cwd=ROOT)


def run(url: str, requests: list[tuple[str, str, str]], gate: str) -> list[dict[str, Any]]:
    """Each request once, one in flight: its split, latency (ms) and whether the gate answered it alone."""
    from tqdm import tqdm

    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        client.post(
            "/v1/search", json={"query": requests[0][2], "domain": requests[0][0], "k": 10}
        )  # warm-up
        for domain, split, nl in tqdm(requests, desc=f"--fuse-gate {gate}", unit="search"):
            start = time.perf_counter()
            body = client.post("/v1/search", json={"query": nl, "domain": domain, "k": 10}).json()
            ms = (time.perf_counter() - start) * 1000
            fusion = body.get("fusion") or {}
            out.append({"domain": domain, "split": split, "ms": ms, "familiar": bool(fusion.get("familiar")),
                        "source": body.get("source"), "ids": [r["id"] for r in body.get("results", [])]})  # fmt: skip
    return out


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": None, "p95": None}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, default=Path(os.environ.get("PRORE_WORKSPACE", "workspace")),
                    help="workspace with the benchmark and both corpora indexed (default $PRORE_WORKSPACE, else workspace)")  # fmt: skip
    ap.add_argument("--config", type=Path, help="the prore config file the workspace was built with")
    ap.add_argument(
        "--model", type=Path, required=True, help="the planner's model directory (RUN/final), with its gate"
    )
    ap.add_argument("--requests", type=int, default=20, help="requests per corpus and split (default 20)")
    ap.add_argument("--out", type=Path, default=RESULTS / "serve_fusion.json")
    args = ap.parse_args()

    from indexing.workspace import Workspace
    from rl.datasets.store import load_split

    ws = Workspace(args.workspace)
    requests = [(d, s, i.nl) for d in ("ecommerce", "email") for s in ("test", "ood")
                for i in load_split(ws, d, s)[: args.requests]]  # fmt: skip
    logs = args.workspace / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    planner_url, planner = model_server(args.model, logs / "bench-planner.log")
    with planner:
        for gate in GATES:
            url, api = query_api(args, planner_url, gate, logs / f"bench-serve-{gate}.log")
            with api:
                runs[gate] = run(url, requests, gate)
                print(f"--fuse-gate {gate}: {len(runs[gate])} searches", file=sys.stderr)
    gated = runs["familiar"]
    rows = []
    groups: dict[str, list[int]] = {"all": list(range(len(gated)))}
    for split in ("test", "ood"):
        groups[split] = [i for i, r in enumerate(gated) if r["split"] == split]
    groups["answered alone"] = [i for i, r in enumerate(gated) if r["familiar"]]
    groups["fused"] = [i for i, r in enumerate(gated) if not r["familiar"]]
    for label, at in groups.items():
        cells = {g: stats([runs[g][i]["ms"] for i in at]) for g in GATES}
        ratio = (cells["familiar"]["p50"] / cells["none"]["p50"]) if at else None
        row: dict[str, Any] = {"requests": label, **cells, "p50_ratio": round(ratio, 3) if ratio else None}
        rows.append(row)
    alone = [r for r in gated if r["familiar"]]
    info = machine()
    print(
        f"{'requests':16} {'n':>4} {'fuse every p50':>14} {'p95':>7} {'gated p50':>10} {'p95':>7} {'ratio p50':>9}"
    )
    for r in rows:
        n, a, b = r["none"]["n"], r["none"], r["familiar"]
        if n:
            print(f"{r['requests']:16} {n:>4} {a['p50']:>14.1f} {a['p95']:>7.1f} {b['p50']:>10.1f} {b['p95']:>7.1f} "
                  f"{r['p50_ratio']:>9.3f}")  # fmt: skip
    print(f"answered alone: {len(alone)} of {len(gated)}; {SAMPLES} samples; {info}")
    write_results(args.out, {"machine": info, "model": str(args.model), "samples": SAMPLES,
                             "requests_per_split": args.requests, "rows": rows, "runs": runs})  # fmt: skip


if __name__ == "__main__":
    run_main(main)
