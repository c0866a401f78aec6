"""How the index build writes a Milvus server: load plans side by side, per step, with the server's own count
of index builds and compactions.

One local Milvus standalone server (``prore stores up``'s, started and stopped here, in a temporary
directory), one seeded ``ecommerce`` corpus embedded once with the hashing embedder, HNSW (M 16,
efConstruction 128, ef 64). Each candidate is a :class:`~indexing.stores.milvus_plan.LoadPlan` and writes
the corpus's four field collections as the build does (``create_collection``, ``write`` per 2,000-row
chunk, ``flush``), timed per step:

* **write**: the insert or upsert requests; **flush**: sealing and persisting; **index**: creating the index
  (after the load, for some plans) and waiting until it covers every row; **load**: into the query node.
  **build** is the sum, what a build waits for.
* **after**: seconds the server kept re-indexing once ``flush`` had returned (compaction rewrote or merged
  indexed segments, which the index node then indexes again), until nothing changed for ``--quiet-s``
  (Milvus looks for compactions every 60 s). **index builds** and **compactions** are counted in the
  server's log, **index busy** is the index node's seconds on these collections.

The run order of the candidates rotates between repeats; medians over ``--repeats``, and ratios of each
candidate's medians over those of ``today`` (the build before this bench: upsert, index first, loaded,
compaction on). Then **search latency**: ``--searches`` searches on each candidate's last collections, one
candidate after another in a random order per query (through ``MilvusStore.search``); p50 / p95 and the
median over queries of the ratio to ``today``. ``--compact-after`` then lets Milvus compact the held-off
candidates' collections and measures again: what holding compaction off costs searches.

``--setting KEY=VALUE`` overrides a key of the server's ``milvus.yaml``. ``--setting
dataCoord.segment.maxSize=64`` (MB, instead of 512) seals 100k products into as many segments per
collection (about 10) as 1M products with the default (about 17): the regime where compaction merges. ``--builds`` also runs whole index builds (``build_index``) with the old plan and the
default one, for each stage's share. Prints tables, writes ``bench/results/milvus_load.json``.

    .venv/bin/python bench/milvus_load.py --docs 50000 --repeats 3
    .venv/bin/python bench/milvus_load.py --docs 100000 --repeats 1 --setting dataCoord.segment.maxSize=64 \
        --setting dataCoord.segment.sealProportion=0.23 --compact-after
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml
from common import RESULTS, ROOT, machine, percentile, run_main, start_milvus, stop_milvus, write_results

from indexing.build import build_index
from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
from indexing.corpora import generate
from indexing.corpora.files import write_corpus
from indexing.embedders.hashing import HashingEmbedder
from indexing.schema import PRODUCTS
from indexing.stores import server
from indexing.stores.milvus import MilvusStore, field_collection
from indexing.stores.milvus_plan import AUTO_COMPACTION, BULK_LOAD, INTERACTIVE, LoadPlan
from indexing.workspace import Workspace
from rl.eval.scale.runs import size_label

OUT = RESULTS / "milvus_load.json"
CHUNK_ROWS = 2_000
"""Rows per write call: the build's default chunk."""
STEPS = ("write", "flush", "index", "load", "build", "after")
CANDIDATES: dict[str, tuple[str, LoadPlan]] = {
    "today": ("upsert, index first, loaded, compaction on", INTERACTIVE),
    "insert": ("insert, else as today", LoadPlan(insert=True)),
    "index-after": (
        "insert, index after the load",
        LoadPlan(insert=True, index_first=False, load_first=False),
    ),
    "first-held": (
        "insert, index first, unloaded, compaction held off",
        LoadPlan(insert=True, load_first=False, auto_compaction=False),
    ),
    "after-held": (
        "insert, index after the load, compaction held off",
        LoadPlan(insert=True, index_first=False, load_first=False, auto_compaction=False),
    ),
    "after-held-5000": (
        "after-held, 5,000 rows per request",
        LoadPlan(
            insert=True, index_first=False, load_first=False, auto_compaction=False, rows_per_request=5000
        ),
    ),
}
HNSW = MilvusConfig(
    index_type="HNSW", metric_type="IP", index_params={"M": 16, "efConstruction": 128}, ef=64, timeout_s=120.0
)
_TS = re.compile(r"^\[(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+)")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


Chunk = tuple[pa.Table, dict[str, np.ndarray]]


def embedded_corpus(docs: int, dim: int) -> list[Chunk]:
    """The seeded corpus in build-sized chunks with the hashing vectors of every vector field."""
    emb = HashingEmbedder(dim)
    return [
        (t, {f: emb.embed(t.column(f).to_pylist()) for f in PRODUCTS.vector_fields})
        for t in generate("ecommerce", docs, seed=0, chunk_rows=CHUNK_ROWS)
    ]


def grouped(chunks: list[Chunk], rows: int) -> Iterator[Chunk]:
    """Consecutive chunks joined until each holds at least ``rows`` rows (a plan's larger requests)."""
    tables: list[pa.Table] = []
    vectors: list[dict[str, np.ndarray]] = []
    for table, vecs in chunks:
        tables.append(table)
        vectors.append(vecs)
        if sum(t.num_rows for t in tables) >= rows:
            yield pa.concat_tables(tables), {f: np.vstack([v[f] for v in vectors]) for f in vecs}
            tables, vectors = [], []
    if tables:
        yield pa.concat_tables(tables), {f: np.vstack([v[f] for v in vectors]) for f in vectors[0]}


def collections(name: str) -> list[str]:
    return [field_collection(name, f) for f in PRODUCTS.vector_fields]


def server_state(client: Any, name: str) -> tuple[Any, ...]:
    """What changes while the server compacts or indexes: segment ids and rows pending an index."""
    state = []
    for physical in collections(name):
        field = physical.rsplit("__", 1)[1]
        segments = sorted(s.segment_id for s in client.list_persistent_segments(physical))
        pending = int(client.describe_index(physical, f"{field}_vec").get("pending_index_rows", 0) or 0)
        state.append((tuple(segments), pending))
    return tuple(state)


def wait_quiet(client: Any, name: str, quiet_s: float, limit_s: float) -> float:
    """Seconds until the server last changed ``name``'s segments or pending rows, once nothing changed for
    ``quiet_s`` with nothing pending (or ``limit_s`` passed)."""
    t0 = time.monotonic()
    last, changed = server_state(client, name), 0.0
    while True:
        time.sleep(2.0)
        now = server_state(client, name)
        elapsed = time.monotonic() - t0
        if now != last:
            last, changed = now, elapsed
        pending = any(p for _, p in now)
        if (not pending and elapsed - changed >= quiet_s) or elapsed > limit_s:
            return changed


def server_events(log_path: Path, offset: int, ids: set[str]) -> dict[str, float]:
    """Index builds, the index node's busy seconds and compactions of collections ``ids`` in the server's
    log from byte ``offset`` on."""
    started: dict[str, datetime] = {}
    builds, busy, compactions = 0, 0.0, 0
    with log_path.open("rb") as fh:
        fh.seek(offset)
        for raw in fh:
            line = raw.decode("utf-8", "replace")
            stamp = _TS.match(line)
            if "IndexNode building index" in line and stamp and (b := re.search(r"indexBuildID=(\d+)", line)):
                started[b.group(1)] = datetime.strptime(stamp.group(1), "%Y/%m/%d %H:%M:%S.%f")
            elif "Successfully build index" in line and (c := re.search(r"Collection=(\d+)\]", line)):
                if c.group(1) in ids:
                    builds += 1
                    b = re.search(r"buildID=(\d+)", line)
                    if stamp and b and b.group(1) in started:
                        end = datetime.strptime(stamp.group(1), "%Y/%m/%d %H:%M:%S.%f")
                        busy += (end - started[b.group(1)]).total_seconds()
            elif "start to execute compaction" in line and (c := re.search(r"Collection=(\d+)\]", line)):
                compactions += c.group(1) in ids
    return {"index_builds": builds, "index_busy_s": round(busy, 1), "compactions": compactions}


def run_candidate(
    uri: str, log_path: Path, name: str, plan: LoadPlan, chunks: list[Chunk], args: argparse.Namespace
) -> dict[str, Any]:
    """One load of the corpus under ``plan`` into fresh collections ``name``: seconds per step and events."""
    from pymilvus import MilvusClient

    dims = {f: args.dim for f in PRODUCTS.vector_fields}
    client = MilvusClient(uri=uri, timeout=120)
    with MilvusStore(uri, HNSW) as store:
        store.drop_collection(name)
        offset = log_path.stat().st_size
        t0 = time.perf_counter()
        store.create_collection(name, PRODUCTS, dims, plan=plan)
        create_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for table, vectors in grouped(chunks, max(CHUNK_ROWS, 2 * plan.rows_per_request)):
            store.write(name, PRODUCTS, table, vectors, fresh=True, plan=plan)
        write_s = time.perf_counter() - t0
        flushed = store.flush(name)
        rows = store.count(name)
    if rows != args.docs:
        raise SystemExit(f"{name}: {rows} rows after the load, not {args.docs}")
    after_s = wait_quiet(client, name, args.quiet_s, args.max_after_s)
    ids = {str(client.describe_collection(p)["collection_id"]) for p in collections(name)}
    segments = [len(client.list_persistent_segments(p)) for p in collections(name)]
    client.close()
    seconds = {
        "write": write_s,
        "flush": flushed.persist_s,
        "index": flushed.index_s,
        "load": flushed.load_s,
        "after": after_s,
    }
    seconds["build"] = create_s + write_s + flushed.persist_s + flushed.index_s + flushed.load_s
    return {
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "segments_per_collection": segments,
        **server_events(log_path, offset, ids),
    }


def search_latency(uri: str, names: dict[str, str], queries: np.ndarray, seed: int) -> dict[str, Any]:
    """Per candidate, p50 / p95 ms of one-query searches on the ``title`` collection, candidates in a random
    order per query, and the median per-query ratio to ``today``."""
    rng = random.Random(seed)
    ms: dict[str, list[float]] = {c: [] for c in names}
    with MilvusStore(uri, HNSW) as store:
        for name in names.values():  # load and warm up
            store.search(name, "title", queries[:5], 10)
        for q in queries:
            order = list(names)
            rng.shuffle(order)
            for c in order:
                t0 = time.perf_counter()
                store.search(names[c], "title", q[None, :], 10)
                ms[c].append(1000 * (time.perf_counter() - t0))
    out: dict[str, Any] = {}
    for c, values in ms.items():
        out[c] = {
            "p50_ms": round(statistics.median(values), 2),
            "p95_ms": round(percentile(values, 95, "linear"), 2),
        }
        if "today" in ms and c != "today":
            out[c]["ratio_to_today"] = round(
                statistics.median(a / b for a, b in zip(values, ms["today"], strict=True)), 3
            )
    return out


def whole_builds(uri: str, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``build_index`` with the old plan and the default one on the same corpus: seconds per stage."""
    from pymilvus import MilvusClient

    rows = []
    for rep in range(args.builds):
        for label, plan in (("today", INTERACTIVE), ("default", BULK_LOAD)):
            ws = root / f"build-{label}-{rep}"
            cfg = Config(
                workspace=ws,
                clickhouse=ClickHouseConfig(
                    chdb_path=str(root / "chdb"), database=f"b_{label.replace('-', '_')}_{rep}"
                ),
                milvus=replace(HNSW, uri=uri),
                embedder=EmbedderConfig(text="hashing", image="hashing", hashing_dim=args.dim),
            )
            schema = PRODUCTS
            write_corpus(
                Workspace(ws),
                schema,
                generate("ecommerce", args.docs, seed=0),
                {"generator": "ecommerce", "size": args.docs},
            )
            log(f"whole build {rep + 1}: {label}")
            t0 = time.perf_counter()
            result = build_index(cfg, "ecommerce", progress=False, milvus_load=plan)
            total = time.perf_counter() - t0
            client = MilvusClient(uri=uri, timeout=120)
            after = wait_quiet(client, result.collection, args.quiet_s, args.max_after_s)
            client.close()
            t = asdict(result.times)
            rows.append({"plan": label, "repeat": rep, "total_s": round(total, 1), "after_s": round(after, 1),
                         "seconds": {k: round(v, 1) for k, v in t.items()},
                         "docs_per_s": {k: round(args.docs / v) for k, v in t.items() if v >= 0.05}})  # fmt: skip
            with MilvusStore(uri, HNSW) as store:
                store.drop_collection(result.collection)
    return rows


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {s: round(statistics.median(r["seconds"][s] for r in runs), 2) for s in STEPS}
    for k in ("index_builds", "index_busy_s", "compactions"):
        out[k] = statistics.median(r[k] for r in runs)
    out["segments_per_collection"] = runs[-1]["segments_per_collection"]
    return out


def report(results: dict[str, Any]) -> str:
    m, docs = results["machine"], results["docs"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu']}, load average {m['load_avg_1m_at_start']:.1f} at start, "
        f"{results['load_avg_1m_at_end']:.1f} at end; {docs:,} products x {len(PRODUCTS.vector_fields)} "
        f"collections, hashing {results['dim']}-d, HNSW M 16 / efC 128; server settings {results['settings'] or 'default'}; "
        f"medians of {results['repeats']} runs",
        "",
        "seconds per step (build = create + write + flush + index + load: what a build waits for; after: "
        "re-indexing it does not wait for)",
        f"{'candidate':<16} "
        + " ".join(f"{s:>7}" for s in STEPS)
        + f" {'docs/s':>7} {'builds':>6} {'busy s':>7} {'compact':>7} {'segments':>12}",
    ]
    for c, row in results["candidates"].items():
        lines.append(
            f"{c:<16} " + " ".join(f"{row[s]:>7.1f}" for s in STEPS) + f" {docs / row['build']:>7,.0f}"
            f" {row['index_builds']:>6.0f} {row['index_busy_s']:>7.1f} {row['compactions']:>7.0f}"
            f" {'/'.join(map(str, row['segments_per_collection'])):>12}"
        )
    lines += ["", "ratio to today (median seconds; <1 is faster)",
              f"{'candidate':<16} {'write':>7} {'index':>7} {'build':>7} {'build+after':>11}  plan"]  # fmt: skip
    base = results["candidates"]["today"]
    for c, row in results["candidates"].items():
        whole = (row["build"] + row["after"]) / (base["build"] + base["after"])
        lines.append(
            f"{c:<16} {row['write'] / base['write']:>7.2f} {row['index'] / max(base['index'], 1e-9):>7.2f}"
            f" {row['build'] / base['build']:>7.2f} {whole:>11.2f}  {CANDIDATES[c][0]}"
        )
    for title, key in (
        ("search latency after the load", "latency"),
        ("after compaction", "latency_compacted"),
    ):
        if results.get(key):
            lines += [
                "",
                f"{title} ({results['searches']} one-query searches each, title field, k 10, ef 64)",
            ]
            for c, v in results[key].items():
                ratio = f"  x{v['ratio_to_today']:.3f} today" if "ratio_to_today" in v else ""
                lines.append(f"{c:<22} p50 {v['p50_ms']:>6.2f} ms  p95 {v['p95_ms']:>6.2f} ms{ratio}")
    for row in results.get("builds", []):
        s = row["seconds"]
        lines.append(
            f"whole build {row['plan']:<8} total {row['total_s']:>6.1f} s, after {row['after_s']:>5.1f} s: "
            f"embed {s['embed_s']:.1f}, clickhouse {s['clickhouse_s']:.1f}, milvus {s['milvus_s']:.1f} (write "
            f"{s['milvus_write_s']:.1f}, flush {s['milvus_flush_s']:.1f}, index {s['milvus_index_s']:.1f}, "
            f"load {s['milvus_load_s']:.1f}), bm25 {s['bm25_s']:.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Milvus server load plans side by side (see the module docstring)."
    )
    parser.add_argument("--docs", type=int, default=50_000, help="products (default 50000)")
    parser.add_argument("--dim", type=int, default=256, help="hashing embedder size (default 256)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per candidate; medians (default 3)")
    parser.add_argument(
        "--candidates", default=",".join(CANDIDATES), help=f"comma-separated, from {', '.join(CANDIDATES)}"
    )
    parser.add_argument(
        "--quiet-s", type=float, default=65.0, help="quiet seconds that end 'after' (default 65)"
    )
    parser.add_argument(
        "--max-after-s", type=float, default=900.0, help="longest wait for quiet (default 900)"
    )
    parser.add_argument(
        "--searches", type=int, default=300, help="searches per candidate (default 300; 0 skips)"
    )
    parser.add_argument(
        "--compact-after", action="store_true", help="then compact held-off collections, search again"
    )
    parser.add_argument(
        "--setting", action="append", default=[], metavar="KEY=VALUE", help="a milvus.yaml key of the server"
    )
    parser.add_argument(
        "--builds", type=int, default=0, help="whole builds per plan, old and default (default 0)"
    )
    parser.add_argument(
        "--workspace", help="directory for the server and builds (default: a temporary one, removed)"
    )
    parser.add_argument("--out", default=str(OUT), help=f"JSON output (default {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    chosen = [c for c in args.candidates.split(",") if c]
    unknown = [c for c in chosen if c not in CANDIDATES]
    if unknown or "today" not in chosen:
        raise SystemExit(
            f"unknown candidates {unknown}; 'today' must be among them"
            if unknown
            else "'today' must be a candidate"
        )
    info = machine()
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="prore-milvus-load-"))
    srv = server.server_dir(root)
    settings = {k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in args.setting)}
    log(f"starting the Milvus server in {srv}")
    uri, why = start_milvus(root, settings=settings)
    if uri is None:
        raise SystemExit(f"error: {why}")
    try:
        log(f"embedding {args.docs:,} products")
        chunks = embedded_corpus(args.docs, args.dim)
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in chosen}
        last: dict[str, str] = {}
        for rep in range(args.repeats):
            order = chosen[rep % len(chosen) :] + chosen[: rep % len(chosen)]
            for c in order:
                name = f"load_{c.replace('-', '_')}_{rep}"
                log(f"run {rep + 1}/{args.repeats}: {c}")
                runs[c].append(
                    run_candidate(uri, srv / server.LOG_FILE, name, CANDIDATES[c][1], chunks, args)
                )
                log(f"  {runs[c][-1]}")
                if rep < args.repeats - 1:
                    with MilvusStore(uri, HNSW) as store:
                        store.drop_collection(name)
                last[c] = name
        results: dict[str, Any] = {
            "machine": info, "docs": args.docs, "dim": args.dim, "repeats": args.repeats,
            "settings": settings, "searches": args.searches,
            "plans": {c: {"meaning": CANDIDATES[c][0], **asdict(CANDIDATES[c][1])} for c in chosen},
            "default_plan": next((c for c in chosen if CANDIDATES[c][1] == BULK_LOAD), None),
            "candidates": {c: medians(r) for c, r in runs.items()}, "runs": runs,
        }  # fmt: skip
        if args.searches:
            rng = np.random.default_rng(1)
            picks = rng.choice(len(chunks), size=args.searches)
            queries = np.stack(
                [chunks[i][1]["title"][int(rng.integers(chunks[i][0].num_rows))] for i in picks]
            )
            log("search latency")
            results["latency"] = search_latency(uri, last, queries, seed=2)
            held = [c for c in chosen if not CANDIDATES[c][1].auto_compaction]
            if args.compact_after and held:
                from pymilvus import MilvusClient

                client = MilvusClient(uri=uri, timeout=120)
                compacted = {}
                for c in held:
                    log(f"compaction on for {c}'s collections")
                    offset = (srv / server.LOG_FILE).stat().st_size
                    for physical in collections(last[c]):
                        client.alter_collection_properties(physical, {AUTO_COMPACTION: "true"})
                    # Milvus looks for compactions every 60 s: wait two rounds at least.
                    after = wait_quiet(client, last[c], max(args.quiet_s, 130.0), args.max_after_s)
                    ids = {str(client.describe_collection(p)["collection_id"]) for p in collections(last[c])}
                    compacted[c] = {"after_s": round(after, 1), **server_events(srv / server.LOG_FILE, offset, ids),
                                    "segments_per_collection": [len(client.list_persistent_segments(p)) for p in collections(last[c])]}  # fmt: skip
                client.close()
                results["compacted"] = compacted
                names = {"today": last["today"], **{f"{c} compacted": last[c] for c in held}}
                results["latency_compacted"] = search_latency(uri, names, queries, seed=3)
        if args.builds:
            results["builds"] = whole_builds(uri, root, args)
        results["load_avg_1m_at_end"] = os.getloadavg()[0]
    finally:
        stop_milvus(root, timeout_s=30)
        if not args.workspace:
            shutil.rmtree(root, ignore_errors=True)
    print(report(results))
    out = write_results(args.out, results)
    print(f"\nwrote {out} ({size_label(args.docs)} products)")
    return 0


if __name__ == "__main__":
    run_main(main)
