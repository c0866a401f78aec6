"""Reward service throughput on one DAPO-scale step, side by side with verl's naive per-sample loop.

One step is 512 prompts x 16 samples = 8,192 rollouts. They come from the workspace's benchmark
instances when one is built (train split), otherwise from programs generated against a generated
corpus (the gold id is the program's first result). Samples of a prompt repeat the way a policy's
do: the gold program several times (bare, after a ``<think>`` block, in a json fence), a common
wrong answer a few times, distinct variants (other phrases, widths, modes, levels), invalid programs
(unknown column, unknown field, misplaced placeholder), garbage, and over-long thinking.

1. ``service``: ``prore reward serve`` in its own process; 8 concurrent clients (verl's reward
   workers), each with many requests in flight, one sample per request, as verl's reward loop sends
   them. The service coalesces them into ``execute_many`` batches.
2. ``one by one``: the same rollouts through the same reward (:class:`rl.reward.RewardScorer`, its
   engine's caches on) one call per sample, in a loop: what a plain ``compute_score`` does.

Both start from a freshly opened engine (cold caches, models loaded). Reports programs/s, the
ratio, p50/p99 per request, the batch sizes the service formed, peak memory of each process, and
whether both paths gave every rollout the same score. Prints a table; writes
``bench/results/reward.json``. ``--quick`` uses a 1,000-product corpus and 64 prompts for the
one-by-one loop (the service still scores all 8,192).

**SFT-sampled rollouts** (``--planner DIR --planner-workspace W``, a second set beside the synthetic mix):
512 train requests of ``W``'s benchmark, 16 samples each at temperature 1.0 from the planner, decoded as a
rollout worker decodes them (the planner card's prompt, free decoding, vLLM's CPU build). Duplicates and
near-duplicates then occur as they do in a training step. The gold id of each request is what its gold
program ranks first on the bench's own index, so the same rollouts score on the 1,000-product and the
3,000-product corpora alike.

Both paths run once per vector store deployment (``--milvus``, default both, side by side): Milvus
Lite in the workspace (the zero-setup default) and the local Milvus server (``prore stores up``,
started in the workspace for the run), each with its own index of the same corpus (FLAT, so the
same hits) and the same rollouts, built once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    ROOT,
    cpu_seconds,
    machine,
    peak_rss_mb,
    percentile,
    run_main,
    start_milvus,
    stop_milvus,
    write_results,
)
from reward_steps import (
    BACKEND_ENV,
    CANDIDATES,
    CANDIDATES_ENV,
    DEPLOYMENTS,
    DOMAIN,
    MILVUS_ENV,
    PROMPTS,
    SAMPLES,
    THREADS_ENV,
    build_rollouts,
    build_sampled,
    config_file,
    disagreements,
    embed_compare,
    engine_variants,
    ensure_index,
    key,
    one_by_one,
    stage_budget,
)

from core import processes
from indexing.stores.server import free_port
from serving.settings import CacheSizes

DEFAULT_OUT = RESULTS / "reward.json"
DEFAULT_WORKSPACE = RESULTS / "workspace" / "reward"
CLIENTS = 8
SERVICE_LOG = "reward-service.log"
"""A reward service's output, in its replica's workspace."""
GOALS = {"step_s": 10.0, "ratio_vs_one_by_one": 30.0}


async def run_clients(
    urls: Sequence[str], rollouts: Sequence[dict[str, Any]], in_flight: int, batch_ms: float = 0.0
) -> dict[str, Any]:
    from rl.reward.client import RewardClient

    latencies: list[float] = []
    keys: list[str | None] = [None] * len(rollouts)

    async def worker(c: int, client: RewardClient) -> None:
        gate = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            r = rollouts[i]
            async with gate:
                t = time.perf_counter()
                res = await client.score_one(r["completion"], domain=r["domain"], gold_id=r["gold_id"])
                latencies.append((time.perf_counter() - t) * 1000)
            keys[i] = key(res)

        await asyncio.gather(*(one(i) for i in range(c, len(rollouts), CLIENTS)))

    clients = [
        RewardClient(urls[c % len(urls)], max_connections=in_flight, batch_window_ms=batch_ms)
        for c in range(CLIENTS)
    ]
    start = time.perf_counter()
    await asyncio.gather(*(worker(c, client) for c, client in enumerate(clients)))
    elapsed = time.perf_counter() - start
    retries = sum(c.stats.retries for c in clients)
    for c in clients:
        await c.aclose()
    return {"elapsed_s": elapsed, "latencies_ms": latencies, "keys": keys, "client_retries": retries}


def scrape(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics").text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def replica_workspace(workspace: Path, r: int) -> Path:
    """Replica ``r``'s own copy of the workspace's SQL store and index records (replica 0 is ``workspace``).

    chDB is embedded: one process holds a data path. On a cluster the replicas share one ClickHouse server;
    here each gets a copy of the same read-only tables, and all of them share the one Milvus server.
    """
    if r == 0:
        return workspace
    copy = workspace.parent / f"{workspace.name}-replica{r}"
    if not copy.is_dir():
        staging = copy.with_name(copy.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for part in ("chdb", "indexes", "corpora", "bm25"):
            if (workspace / part).exists():
                shutil.copytree(workspace / part, staging / part, symlinks=True)
        staging.rename(copy)
    return copy


def service_run(
    workspace: Path,
    rollouts: list[dict[str, Any]],
    in_flight: int,
    window_ms: float,
    workers: int = 1,
    batch_ms: float = 0.0,
    replicas: int = 1,
) -> dict[str, Any]:
    """``replicas`` services (each with ``workers`` engine threads) on loopback ports; client ``c`` sends to
    replica ``c % replicas``, as a Service spreads connections over its pods."""
    procs: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for r in range(replicas):
            ws = replica_workspace(workspace, r)
            port = free_port()
            cmd = [sys.executable, "-m", "prore", "--workspace", str(ws), "--embedder", "minilm",
                   "--config", str(config_file(ws)), "reward", "serve", "--domain", DOMAIN, "--port", str(port),
                   "--window-ms", str(window_ms), "--engine-workers", str(workers)]  # fmt: skip
            log = ws / SERVICE_LOG
            procs.append((processes.spawn(cmd, log, cwd=ROOT), f"http://127.0.0.1:{port}", log))
        deadline = time.monotonic() + 300  # for all of them: they start side by side
        try:
            for proc, url, log in procs:
                left = max(0.0, deadline - time.monotonic())
                processes.wait_ready(url + "/readyz", what="the reward service", timeout_s=left, poll_s=0.2,
                                     running=proc, log=log)  # fmt: skip
        except processes.NotReady as exc:
            raise SystemExit(exc.one_line()) from None
        pids = [proc.pid for proc, _, _ in procs]
        service_cpu, client_cpu = [cpu_seconds(pid) for pid in pids], cpu_seconds(os.getpid())
        out = asyncio.run(run_clients([url for _, url, _ in procs], rollouts, in_flight, batch_ms))
        # The clients share these cores with the service here; on a cluster verl's workers are elsewhere.
        service_after, client_after = [cpu_seconds(pid) for pid in pids], cpu_seconds(os.getpid())
        if None not in (*service_cpu, *service_after, client_cpu, client_after):
            out["service_cpu_s"] = sum(service_after) - sum(service_cpu)  # type: ignore[arg-type]
            out["client_cpu_s"] = client_after - client_cpu  # type: ignore[operator]
        scraped = [scrape(url) for _, url, _ in procs]
        metrics = {k: sum(m.get(k, 0.0) for m in scraped) for k in scraped[0]}
        out["peak_rss_mb"] = sum(peak_rss_mb(pid) or 0.0 for pid in pids)
    finally:
        for proc, _, _ in procs:
            processes.stop(proc, grace_s=30)
    count = metrics.get("reward_batch_items_count", 0.0)
    out["batches"] = count
    out["mean_batch_items"] = metrics.get("reward_batch_items_sum", 0.0) / count if count else 0.0
    out["mean_batch_requests"] = metrics.get("reward_batch_requests_sum", 0.0) / count if count else 0.0
    out["batch_seconds_sum"] = metrics.get("reward_batch_seconds_sum", 0.0)
    # Rates are per replica: their mean (the replicas score the same kind of traffic).
    out["cache_hit_rate"] = {k.split("cache=")[1].split(",")[0].rstrip("}"): v / replicas for k, v in metrics.items()
                             if k.startswith("reward_engine_cache_hit_rate")}  # fmt: skip
    out["layer_pass_rate"] = {k.split("layer=")[1].rstrip("}"): v / replicas for k, v in metrics.items()
                              if k.startswith("reward_layer_pass_rate")}  # fmt: skip
    return out


# -- report ---------------------------------------------------------------------------------------


def summary(run: dict[str, Any], n: int) -> dict[str, Any]:
    lat = run.pop("latencies_ms")
    run.pop("keys", None)
    return {**run, "n": n, "programs_per_s": n / run["elapsed_s"], "p50_ms": statistics.median(lat),
            "p99_ms": percentile(lat, 99)}  # fmt: skip


def table(results: dict[str, Any]) -> str:
    """Every rollout set's table, then the machine."""
    out = [set_table(name, run, results) for name, run in results["sets"].items()]
    m = results["machine"]
    out.append(f"client process peak memory: {results['client_peak_rss_mb']:.0f} MB\n"
               f"machine: {m['cores']} cores, {m['cpu']}, load {m['load_avg_1m_at_start']:.1f}")  # fmt: skip
    return "\n\n".join(out)


def set_table(name: str, results: dict[str, Any], common: dict[str, Any]) -> str:
    r0 = results["rollouts"]
    lines = [f"[{name}] {PROMPTS} prompts x {SAMPLES} samples = {PROMPTS * SAMPLES} rollouts from {r0['source']} "
             f"({r0['distinct_completions']} distinct completions, {r0['corpus_docs']} docs); MiniLM query "
             f"embedder on {common.get('minilm_backend', 'torch')}",
             f"{'Milvus':<8} {'path':<36} {'items':>6} {'seconds':>8} {'programs/s':>11} {'p50 ms':>8} {'p99 ms':>9} "
             f"{'peak MB':>8}"]  # fmt: skip
    notes: list[str] = []
    for deployment, d in results["deployments"].items():
        if "service" not in d:
            notes.append(f"{deployment}: not measured ({d.get('skipped')})")
            continue
        s, o = d["service"], d["one_by_one"]
        rows = [(f"service, {label}", r) for label, r in d["service_by_variant"].items()]
        for label, r in d["service_by_variant"].items():
            if len(r.get("repeats_s", ())) > 1:
                notes.append(f"{deployment}: service {label}: the median of runs of "
                             + ", ".join(f"{x:.2f}" for x in r["repeats_s"]) + " s")  # fmt: skip
        for label, r in (*rows, ("one by one", o)):
            lines.append(f"{deployment:<8} {label:<36} {r['n']:>6} {r['elapsed_s']:>8.2f} {r['programs_per_s']:>11.1f} "
                         f"{r['p50_ms']:>8.2f} {r['p99_ms']:>9.2f} {r['peak_rss_mb'] or 0:>8.0f}")  # fmt: skip
        notes.append(f"{deployment}: ratio (programs/s, service {d['fastest_service']} / one by one) "
                     f"{d['ratio']:.1f}x; same scores: "
                     f"{d['agree']}; {s['batches']:.0f} batches of {s['mean_batch_items']:.1f} items "
                     f"({s['mean_batch_requests']:.1f} requests) on average, {s['batch_seconds_sum']:.2f} s in the "
                     f"engine; client retries {s['client_retries']}; CPU seconds: service "
                     f"{s.get('service_cpu_s', float('nan')):.1f}, clients {s.get('client_cpu_s', float('nan')):.1f}")  # fmt: skip
        for label, dis in d.get("disagreements", {}).items():
            if dis["n"]:
                notes.append(f"{deployment}: service {label} scored {dis['n']} rollouts unlike the loop: "
                             + ", ".join(f"{k}: {v}" for k, v in dis["by_errors"].items()))  # fmt: skip
        notes.append(f"{deployment}: layer pass rates " + ", ".join(f"{k} {v:.2f}" for k, v in s["layer_pass_rate"].items())
                     + "; cache hit rates " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(s["cache_hit_rate"].items())))  # fmt: skip
    for deployment, d in results["deployments"].items():
        budgets = d.get("stage_budgets", {})
        for candidates, b in budgets.items():
            where = f", {candidates}" if len(budgets) > 1 else ""
            lines.append(f"{deployment}: in-process step {b['wall_s']:.2f} s for {b['programs']} distinct programs in "
                         f"batches of 512{where}; engine stages (s): " + ", ".join(
                             f"{k} {v:.2f}" for k, v in b["stage_s"].items() if k != "total" and v > 0.0005)
                         + f"; total {b['stage_s']['total']:.2f}")  # fmt: skip
            if b.get("store_calls"):
                lines.append(
                    f"{deployment}:   its calls: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(b["store_calls"].items()))
                )
        first, *others = budgets or [""]
        for engine in others:
            lines.append(f"{deployment}: in-process step, {engine} / {first}: "
                         f"{budgets[engine]['wall_s'] / budgets[first]['wall_s']:.2f}x the time")  # fmt: skip
    lines += notes
    if "embed_batching" in results:
        e = results["embed_batching"]
        lines.append(f"ONNX MiniLM on the step's {e['phrases']} distinct phrases ({e['tokens_median']:g} tokens median, "
                     f"{e['tokens_max']} max): padded batches {e['median_s']['padded']:.2f} s, length groups "
                     f"{e['median_s']['length groups']:.2f} s ({e['ratio']:.2f}x); vectors differ by at most "
                     f"{e['max_abs_diff']:.1e}")  # fmt: skip
    if "server_vs_lite" in results:
        x = results["server_vs_lite"]
        lines.append(
            f"server / lite (programs/s): service {x['service']:.2f}x, one by one {x['one_by_one']:.2f}x"
        )
    for goal, (value, target, met) in results["goals"].items():
        lines.append(
            f"goal {goal:<36} target {target:>6.1f}  reached {value:>8.2f}  {'met' if met else 'NOT met'}"
        )
    return "\n".join(lines)


def measure(
    deployment: str,
    workspace: Path,
    rollouts_file: Path,
    rollouts: list[dict[str, Any]],
    docs: int,
    loop_prompts: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Both paths on one deployment's index (built first, unless present): the service, then one by one."""
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--workspace", str(workspace), "--rollouts", str(rollouts_file), "--seed", str(args.seed)]
    print(f"{deployment}: the index (reused when present)", file=sys.stderr)
    start = time.perf_counter()
    subprocess.run([*me, "--child", "index", "--docs", str(docs), *common], check=True)
    out: dict[str, Any] = {"index_s": time.perf_counter() - start}
    services: dict[str, dict[str, Any]] = {}
    for engine, env in engine_variants(args).items():
        os.environ.update(env)  # the service's config file and the children read it
        for replicas in args.replicas:
            for workers in args.engine_workers:
                for batch_ms in args.client_batch_ms:
                    label = f"{replicas} repl. x {workers} wkr, cl. batch {batch_ms:g} ms"
                    if engine:
                        label += f", {engine}"
                    print(
                        f"{deployment}: service, {len(rollouts)} rollouts, {CLIENTS} clients, {label}",
                        file=sys.stderr,
                    )
                    runs = [
                        service_run(
                            workspace, rollouts, args.in_flight, args.window_ms, workers, batch_ms, replicas
                        )
                        for _ in range(args.repeat)
                    ]
                    runs.sort(key=lambda run: run["elapsed_s"])
                    services[label] = runs[len(runs) // 2]  # the median run (of an odd number)
                    services[label]["repeats_s"] = [run["elapsed_s"] for run in runs]
    for name in (CANDIDATES_ENV, THREADS_ENV):
        os.environ.pop(name, None)
    fastest = min(services, key=lambda w: services[w]["elapsed_s"])
    print(f"{deployment}: one by one, {loop_prompts * SAMPLES} rollouts", file=sys.stderr)
    loop_out = subprocess.run([*me, "--child", "loop", "--loop-prompts", str(loop_prompts), *common],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip
    loop = json.loads(loop_out.strip().splitlines()[-1])
    out["stage_budgets"] = {}
    for engine, env in engine_variants(args).items():
        print(
            f"{deployment}: the engine's stage budget, in-process{', ' + engine if engine else ''}",
            file=sys.stderr,
        )
        stages_out = subprocess.run([*me, "--child", "stages", *common], check=True, capture_output=True, text=True,
                                    env={**os.environ, **env}).stdout  # fmt: skip
        out["stage_budgets"][engine or "store"] = json.loads(stages_out.strip().splitlines()[-1])
    subset = [i for i, r in enumerate(rollouts) if r["prompt"] < loop_prompts]
    out["agree"] = all(
        run["keys"][i] == loop["keys"][j] for run in services.values() for j, i in enumerate(subset)
    )
    out["disagreements"] = {label: disagreements(run["keys"], loop["keys"], subset, rollouts)
                            for label, run in services.items()}  # fmt: skip
    out["fastest_service"] = fastest
    out["service_by_variant"] = {label: summary(run, len(rollouts)) for label, run in services.items()}
    out["service"] = out["service_by_variant"][fastest]
    out["one_by_one"] = summary(loop, loop["n"])
    out["ratio"] = out["service"]["programs_per_s"] / out["one_by_one"]["programs_per_s"]
    return out


def child(mode: str, args: argparse.Namespace) -> int:
    if mode == "build":
        data = build_rollouts(args.workspace, args.docs, args.seed)
        args.rollouts.write_text(json.dumps(data))
    elif mode == "sample":
        data = build_sampled(args.workspace, args.docs, args.seed, args.planner, args.planner_workspace)
        args.rollouts.write_text(json.dumps(data))
    elif mode == "index":
        ensure_index(args.workspace, args.docs)
    elif mode == "embed":
        print(json.dumps(embed_compare(args.rollouts)))
    elif mode == "stages":
        print(json.dumps(stage_budget(args.workspace, args.rollouts)))
    else:
        print(json.dumps(one_by_one(args.workspace, args.rollouts, args.loop_prompts)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a 1,000-product corpus (default: 3,000, the paper's)"
    )
    parser.add_argument(
        "--workspace", type=Path, default=DEFAULT_WORKSPACE, help="where the corpus and index live"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--in-flight", type=int, default=128, help="requests each client keeps in flight (default 128)"
    )
    parser.add_argument(
        "--window-ms", type=float, default=5.0, help="the service's coalescing window (default 5)"
    )
    parser.add_argument(
        "--minilm-backend",
        choices=("torch", "onnx", "onnx-int8"),
        default="onnx",
        help="runtime of the MiniLM query embedder in both paths (default onnx: the same vectors as torch, "
        "cosine >= 0.99, about 2.5x faster in batches here)",
    )
    parser.add_argument(
        "--milvus",
        type=lambda v: [d.strip() for d in v.split(",") if d.strip()],
        default=list(DEPLOYMENTS),
        help="vector store deployments to compare, side by side: lite (Milvus Lite in the workspace), server "
        "(the local Milvus server, started for the run); default lite,server",
    )
    parser.add_argument(
        "--engine-workers",
        type=lambda v: [int(w) for w in v.split(",") if w.strip()],
        default=[1],
        help="the service's engine threads, side by side (a comma list, for example 1,2; default 1)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each service variant; the table shows the median run (default 1; use an odd number)",
    )
    parser.add_argument(
        "--replicas",
        type=lambda v: [int(w) for w in v.split(",") if w.strip()],
        default=[1],
        help="reward service processes behind the clients, side by side (a comma list, for example 1,2; default 1); "
        "each replica beyond the first runs on its own copy of the workspace's chDB tables",
    )
    parser.add_argument(
        "--client-batch-ms",
        type=lambda v: [float(w) for w in v.split(",") if w.strip()],
        default=[0.0, 2.0],
        help="the clients' batching window, side by side (0: one request per sample, as verl's loop sends them; "
        "default 0,2)",
    )
    parser.add_argument(
        "--candidates",
        type=lambda v: [c.strip() for c in v.split(",") if c.strip()],
        default=["store"],
        help="where a conditioned dense search scores its candidates, side by side: store (the engine's "
        "default, one Milvus search per candidate set) or process (serving.planning.candidates_in_process); "
        "default store",
    )
    parser.add_argument(
        "--search-threads",
        type=lambda v: [int(w) for w in v.split(",") if w.strip()],
        default=[CacheSizes().search_threads],
        help="store searches of one batch in flight at once (serving.engine.search_threads), side by side "
        f"(a comma list, for example 1,4; default {CacheSizes().search_threads})",
    )
    parser.add_argument(
        "--planner",
        type=Path,
        default=None,
        help="a trained planner directory: add SFT-sampled rollouts (16 samples per train request at temperature "
        "1.0) beside the synthetic mix; needs --planner-workspace",
    )
    parser.add_argument(
        "--planner-workspace",
        type=Path,
        default=None,
        help="the workspace whose ecommerce benchmark train split gives the planner's requests (make demo's)",
    )
    parser.add_argument(
        "--no-synthetic", action="store_true", help="measure only the SFT-sampled rollouts (with --planner)"
    )
    parser.add_argument(
        "--loop-prompts",
        type=int,
        default=PROMPTS,
        help=f"prompts the one-by-one loop scores (default {PROMPTS}: all {PROMPTS * SAMPLES} rollouts)",
    )
    parser.add_argument(
        "--child", choices=("build", "sample", "index", "loop", "stages", "embed"), help=argparse.SUPPRESS
    )
    parser.add_argument("--docs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rollouts", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.milvus) - set(DEPLOYMENTS))
    if unknown or not args.milvus:
        parser.error(f"--milvus takes {', '.join(DEPLOYMENTS)}; got {', '.join(unknown) or 'nothing'}")
    unknown = sorted(set(args.candidates) - set(CANDIDATES))
    if unknown or not args.candidates:
        parser.error(f"--candidates takes {', '.join(CANDIDATES)}; got {', '.join(unknown) or 'nothing'}")
    if not args.search_threads or min(args.search_threads) < 1:
        parser.error("--search-threads takes numbers of 1 or more")
    if not args.child:
        # The children inherit the backend; their own default must not override it (it did: the loop, stage and
        # index children of an onnx-int8 run ran fp32 against the int8 index, the "same scores: False" of int8).
        os.environ[BACKEND_ENV] = args.minilm_backend
    if args.child:
        return child(args.child, args)

    if (args.planner is None) != (args.planner_workspace is None):
        parser.error("--planner and --planner-workspace go together")
    if args.no_synthetic and args.planner is None:
        parser.error("--no-synthetic needs --planner")
    docs = 1000 if args.quick else 3000
    base = args.workspace / f"products-{docs}"
    base.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    os.environ.pop(MILVUS_ENV, None)
    sets: dict[str, tuple[str, Path, list[str]]] = {
        "synthetic": ("build", base / f"rollouts-s{args.seed}.json", [])
    }
    if args.no_synthetic:
        sets.clear()
    if args.planner is not None:
        sets["sft-sampled"] = ("sample", base / f"rollouts-sft-s{args.seed}.json", [
            "--planner", str(args.planner.resolve()), "--planner-workspace", str(args.planner_workspace.resolve())])  # fmt: skip
    results: dict[str, Any] = {"quick": args.quick, "machine": machine(), "in_flight_per_client": args.in_flight,
                               "window_ms": args.window_ms, "minilm_backend": args.minilm_backend, "sets": {}}  # fmt: skip
    for name, (mode, rollouts_file, extra) in sets.items():
        print(f"[{name}] building the corpus, index and rollouts (reused when present)", file=sys.stderr)
        if not rollouts_file.is_file():
            subprocess.run([*me, "--child", mode, "--docs", str(docs), "--workspace", str(base),
                            "--rollouts", str(rollouts_file), "--seed", str(args.seed), *extra], check=True)  # fmt: skip
        results["sets"][name] = measure_set(args, base, rollouts_file, docs)
        print(f"[{name}] the step's phrases embedded padded and in length groups", file=sys.stderr)
        embedded = subprocess.run([*me, "--child", "embed", "--workspace", str(base), "--rollouts", str(rollouts_file)],
                                  check=True, capture_output=True, text=True).stdout  # fmt: skip
        results["sets"][name]["embed_batching"] = json.loads(embedded.strip().splitlines()[-1])
    results["client_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    write_results(args.out, results)
    print(table(results))
    print(f"wrote {args.out}")
    return 0


def measure_set(args: argparse.Namespace, base: Path, rollouts_file: Path, docs: int) -> dict[str, Any]:
    """One rollout set on every deployment, side by side, and its goals."""
    data = json.loads(rollouts_file.read_text())
    rollouts = data["rollouts"]
    loop_prompts = min(args.loop_prompts, PROMPTS)
    results: dict[str, Any] = {
        "rollouts": {k: v for k, v in data.items() if k != "rollouts"},
        "deployments": {},
    }
    for deployment in args.milvus:
        workspace = base if deployment == "lite" else args.workspace / f"products-{docs}-{deployment}"
        workspace.mkdir(parents=True, exist_ok=True)
        if deployment == "server":
            uri, note = start_milvus(workspace)
            if uri is None:
                results["deployments"][deployment] = {"skipped": note}
                print(f"{deployment}: {note}", file=sys.stderr)
                continue
            os.environ[MILVUS_ENV] = uri
        try:
            results["deployments"][deployment] = measure(
                deployment, workspace, rollouts_file, rollouts, docs, loop_prompts, args
            )
        finally:
            os.environ.pop(MILVUS_ENV, None)
            if deployment == "server":
                stop_milvus(workspace)
    measured = {d: r for d, r in results["deployments"].items() if "service" in r}
    if not measured:
        raise SystemExit("error: no deployment could be measured: " + "; ".join(
            f"{d}: {r.get('skipped')}" for d, r in results["deployments"].items()))  # fmt: skip
    if "lite" in measured and "server" in measured:
        results["server_vs_lite"] = {
            "service": measured["server"]["service"]["programs_per_s"]
            / measured["lite"]["service"]["programs_per_s"],
            "one_by_one": measured["server"]["one_by_one"]["programs_per_s"]
            / measured["lite"]["one_by_one"]["programs_per_s"],
        }
    best = min(measured, key=lambda d: measured[d]["service"]["elapsed_s"])
    step_s, ratio = measured[best]["service"]["elapsed_s"], measured[best]["ratio"]
    results["goals"] = {
        f"step seconds (8,192 rollouts; {best})": (step_s, GOALS["step_s"], step_s <= GOALS["step_s"]),
        f"x one by one ({best})": (
            ratio,
            GOALS["ratio_vs_one_by_one"],
            ratio >= GOALS["ratio_vs_one_by_one"],
        ),
    }
    return results


if __name__ == "__main__":
    run_main(main)
