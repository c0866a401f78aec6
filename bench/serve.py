"""Query API under a bounded load on loopback: ``/v1/execute`` (engine only) and ``/v1/search`` (with a planner).

The API runs as it is deployed: ``prore serve`` in a process of its own, over a workspace's ecommerce
index (default ``bench/results/workspace-serve``, 3,000 products with MiniLM, built once). The load
generator is an ``aiohttp`` client in this process (a server thread in the client's process would share
its GIL, and ``httpx``'s own cost per request is about the size of the goal); it keeps 1, 4 and 16
requests in flight for a fixed number of requests each and records, per request, the HTTP latency and
the stage timings the API reports. Before the load, a child process runs the same programs directly on
an engine to give the engine's own latency (chDB binds its path to one process, so the engine and the
server never overlap), and the table shows what ``/v1/execute`` adds over it at p50 (goal: at most 2 ms).

``/v1/search`` goes to the planner at ``--planner-url`` (an OpenAI-compatible base URL, e.g. a vLLM CPU
server of the local checkpoint); without one, it measures the fallback path (every search is a fallback).

Prints a table; writes ``bench/results/serve.json``. ``--quick``: 1,000 products, fewer requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from common import RESULTS, ROOT, ensure_corpus, machine, percentile, run_main, write_results

from core import processes
from indexing.build import build_index
from indexing.config import ClickHouseConfig, Config, EmbedderConfig
from indexing.stores.server import free_port
from serving.dsl import parse_program
from serving.engine import Engine

DEFAULT_OUT = RESULTS / "serve.json"
DEFAULT_WORKSPACE = RESULTS / "workspace-serve"
CLIENTS = (1, 4, 16)
PHRASES = ("great noise cancelling", "long battery life", "sturdy build", "comfortable fit", "bright light",
           "easy to set up", "fast charging", "good value")  # fmt: skip
REQUESTS = ("wireless headphones under $200", "a white desk lamp", "a sturdy backpack for hiking",
            "fast charging power bank", "black running shoes rated above 4")  # fmt: skip


def programs() -> list[dict[str, Any]]:
    out = []
    for i, phrase in enumerate(PHRASES):
        out.append({
            "sql": f"SELECT id FROM products WHERE price < {100 + 50 * i} AND id IN <text_1>",
            "retrieval_list": [{"type": "text", "field": "review", "query": phrase}],
        })  # fmt: skip
    return out


def summary(values: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of ``values``: each the value nearest its position (NaN for none)."""
    return {f"p{q}": round(percentile(values, q, "nearest"), 3) for q in (50, 95, 99)}


def ensure_index(cfg: Config, size: int) -> None:
    ensure_corpus(cfg.workspace, size)
    build_index(cfg, "ecommerce", progress=False)


def engine_latency(engine: Engine, progs: list[dict[str, Any]], reps: int) -> list[float]:
    """The engine's own latency (ms) on the warm programs, as the API's engine stage sees them."""
    parsed = [parse_program(json.dumps(p)) for p in progs]
    for p in parsed:
        engine.execute(p, 10)
    out = []
    for _ in range(reps):
        for p in parsed:
            t = time.perf_counter()
            engine.execute(p, 10)
            out.append((time.perf_counter() - t) * 1000)
    return out


async def load(url: str, path: str, bodies: list[dict[str, Any]], clients: int, total: int) -> dict[str, Any]:
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    statuses: dict[int, int] = {}
    fallbacks = 0
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for i in range(total):
        queue.put_nowait(bodies[i % len(bodies)])

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal fallbacks
        while True:
            try:
                body = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t = time.perf_counter()
            async with session.post(url + path, json=body) as r:
                data = await r.json() if r.status == 200 else None
            latencies.append((time.perf_counter() - t) * 1000)
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if data is not None:
                fallbacks += data["source"] == "fallback"
                for stage, ms in data["timings"].items():
                    stages.setdefault(stage, []).append(ms)

    start = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=clients)
    ) as session:
        await asyncio.gather(*(worker(session) for _ in range(clients)))
    seconds = time.perf_counter() - start
    return {
        "clients": clients, "requests": total, "seconds": round(seconds, 3), "throughput_rps": round(total / seconds, 2),
        "latency_ms": summary(latencies), "stages_ms": {s: summary(v) for s, v in sorted(stages.items())},
        "statuses": statuses, "fallback_rate": round(fallbacks / max(1, statuses.get(200, 0)), 4),
    }  # fmt: skip


def table(results: dict[str, Any]) -> str:
    lines = ["| route | clients | req/s | p50 ms | p95 ms | p99 ms | engine p50 | plan p50 | fallback rate |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for route, runs in results["routes"].items():
        for r in runs:
            st = r["stages_ms"]
            eng = st.get("engine_ms", st.get("fallback_ms", {})).get("p50", float("nan"))
            plan = st.get("plan_ms", {}).get("p50", float("nan"))
            lines.append(f"| {route} | {r['clients']} | {r['throughput_rps']:.1f} | {r['latency_ms']['p50']:.2f} | "
                         f"{r['latency_ms']['p95']:.2f} | {r['latency_ms']['p99']:.2f} | {eng:.2f} | {plan:.2f} | "
                         f"{r['fallback_rate']:.2f} |")  # fmt: skip
    g = results["goal"]
    lines.append("")
    lines.append(f"engine alone p50 {g['engine_p50_ms']:.2f} ms; /v1/execute at 1 client p50 {g['execute_p50_ms']:.2f} ms; "
                 f"added {g['added_ms']:.2f} ms (goal <= 2 ms: {'met' if g['met'] else 'not met'})")  # fmt: skip
    return "\n".join(lines)


def bench_config(workspace: Path) -> Config:
    return Config(
        workspace=workspace,
        clickhouse=ClickHouseConfig(chdb_path=str(workspace / "chdb")),
        embedder=EmbedderConfig(text="minilm", image="minilm"),
    )


def engine_child(workspace: Path, size: int, reps: int) -> int:
    """Build the index when needed, then print the engine's own latencies (ms) as one JSON line."""
    cfg = bench_config(workspace)
    ensure_index(cfg, size)
    with Engine.open(cfg, "ecommerce") as engine:
        print(json.dumps(engine_latency(engine, programs(), reps)))
    return 0


@contextlib.contextmanager
def prore_serve(workspace: Path, planner_url: str | None, planner_model: str, log: Path) -> Iterator[str]:
    """``prore serve`` over the workspace's ecommerce index on a free loopback port while the block runs: its
    URL, once it answers (within 300 s). Stopped, with what it started, on the way out."""
    port = free_port()
    cmd = [sys.executable, "-m", "prore", "--workspace", str(workspace), "--embedder", "minilm",
           "serve", "--domains", "ecommerce", "--port", str(port), "--max-concurrent", "64",
           "--log-level", "warning"]  # fmt: skip
    if planner_url:
        cmd += ["--planner-url", planner_url, "--planner-model", planner_model, "--planner-timeout-s", "30"]
    url = f"http://127.0.0.1:{port}"
    try:
        with processes.served(
            cmd, url + "/healthz", log, what="prore serve", timeout_s=300, poll_s=0.2, cwd=ROOT, grace_s=60
        ):
            yield url
    except processes.NotReady as exc:
        raise SystemExit(exc.one_line()) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE)
    parser.add_argument("--planner-url", help="OpenAI-compatible base URL of a planner, up to /v1")
    parser.add_argument("--planner-model", default="planner")
    parser.add_argument("--requests", type=int, default=200, help="requests per route and client count")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child-engine", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = 1_000 if args.quick else 3_000
    total = 40 if args.quick else args.requests
    progs = programs()
    reps = max(3, total // len(progs))
    if args.child_engine:
        return engine_child(args.workspace, size, reps)
    args.workspace.mkdir(parents=True, exist_ok=True)
    child = [sys.executable, str(Path(__file__).resolve()), "--child-engine", "--workspace", str(args.workspace),
             "--requests", str(args.requests), *(["--quick"] if args.quick else [])]  # fmt: skip
    alone = json.loads(
        subprocess.run(child, check=True, capture_output=True, text=True).stdout.splitlines()[-1]
    )
    results: dict[str, Any] = {"quick": args.quick, "corpus_size": size, "planner": args.planner_url,
                               "server": "prore serve (own process)", "client": "aiohttp", "routes": {}}  # fmt: skip
    with prore_serve(
        args.workspace, args.planner_url, args.planner_model, args.workspace / "serve.log"
    ) as url:
        execute_bodies = [{"program": p, "domain": "ecommerce", "k": 10} for p in progs]
        search_bodies = [{"query": q, "domain": "ecommerce", "k": 10} for q in REQUESTS]
        asyncio.run(load(url, "/v1/execute", execute_bodies, 1, len(progs)))  # warm the API path
        results["routes"]["/v1/execute"] = [
            asyncio.run(load(url, "/v1/execute", execute_bodies, c, total)) for c in CLIENTS
        ]
        search_total = max(10, total // 4) if args.planner_url else total
        results["routes"]["/v1/search"] = [
            asyncio.run(load(url, "/v1/search", search_bodies, c, search_total)) for c in CLIENTS
        ]
    engine_p50 = percentile(alone, 50, "nearest")
    execute_p50 = results["routes"]["/v1/execute"][0]["latency_ms"]["p50"]
    results["engine_alone_ms"] = summary(alone)
    results["goal"] = {"engine_p50_ms": round(engine_p50, 3), "execute_p50_ms": execute_p50,
                       "added_ms": round(execute_p50 - engine_p50, 3), "met": execute_p50 - engine_p50 <= 2.0}  # fmt: skip
    results["machine"] = machine()
    print(table(results))
    print(f"wrote {write_results(args.out, results)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
