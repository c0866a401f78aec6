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
     corpus labels with the relevant-set conditions of :mod:`rl.bench.relevance` (exactly, with no cap
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
import contextlib
import dataclasses
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loaded by path (its tests): bench/ is not on sys.path

import scale_diagnosis as diagnosis
from common import RESULTS, ROOT, Run, machine, percentile, size_label

from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
from indexing.errors import ProReError
from indexing.schema import PRODUCTS, Role
from indexing.workspace import Workspace

DOMAIN = "ecommerce"
DEFAULT_SIZES = (5_000, 50_000, 200_000, 1_000_000)
QUICK_SIZES = (2_000, 10_000)
DEFAULT_EMBEDDERS = ("hashing", "minilm-onnx-int8")
NEURAL = ("minilm", "minilm-onnx", "minilm-onnx-int8")
DEFAULT_OUT = RESULTS / "scale.json"
DEFAULT_WORKSPACE = RESULTS / "workspace-scale"
K = 20
"""The fixed result width and every entry's default width (the paper's K)."""
BUILD_STAGES = ("generate", "clickhouse", "embed", "milvus", "bm25", "total")
STAGE_LABELS = {
    "generate": "corpus generation",
    "clickhouse": "ClickHouse load",
    "embed": "embedding",
    "milvus": "Milvus insert + index build",
    "bm25": "BM25",
    "total": "total",
}
LEVELS = ("L1", "L2", "L3")
GOAL_P50_MS = 50.0
GOAL_P1_RATIO = 0.95
RESULT_FILE = "result.json"
BUILD_FILE = "build.json"


@dataclass(frozen=True)
class Candidate:
    """One way of planning retrieval: ``planning`` holds the ``serving.planning`` options it sets."""

    name: str
    label: str
    planning: Mapping[str, Any]


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("fixed", "fixed K=20", {"pushdown": False, "adaptive_k": False}),
    Candidate("pushdown", "filter pushdown", {"pushdown": True, "adaptive_k": False}),
    Candidate("adaptive", "adaptive K", {"pushdown": False, "adaptive_k": True}),
    Candidate("both", "pushdown + adaptive K", {"pushdown": True, "adaptive_k": True}),
    Candidate("conditional", "conditional", {"pushdown": False, "adaptive_k": False, "conditional": True}),
    Candidate(
        "conditional_pushdown",
        "conditional + pushdown",
        {"pushdown": True, "adaptive_k": False, "conditional": True},
    ),
    Candidate("all", "all three passes", {"pushdown": True, "adaptive_k": True, "conditional": True}),
)
"""Side by side in one run. An option the engine does not have yet counts as off: a candidate that
needs one on is left out (and said so) until ``serving.planning`` has it."""


# -- small helpers --------------------------------------------------------------------------------


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma list of counts such as ``5k,50k,1M`` or ``3000``; increasing, no repeats."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d[\d_]*)\s*([kKmM]?)\s*", part)
        if not m:
            raise SystemExit(f"error usage: --sizes expects counts like 5k,50k,1M, got {part!r}")
        n = int(m.group(1).replace("_", "")) * {"": 1, "k": 1000, "m": 1_000_000}[m.group(2).lower()]
        if n < 100:
            raise SystemExit(f"error usage: --sizes: each size must be at least 100 documents, got {part!r}")
        out.append(n)
    return tuple(sorted(set(out)))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def planning_options() -> tuple[type[Any] | None, dict[str, Any]]:
    """``(PlanningOptions class, its default values)`` when ``serving.planning`` exists, else ``(None, {})``."""
    from serving.settings import ServingSettings

    fields = {f.name: f for f in dataclasses.fields(ServingSettings)}
    if "planning" not in fields:
        return None, {}
    default = ServingSettings().planning  # type: ignore[attr-defined]
    return type(default), dataclasses.asdict(default)


def available_candidates(wanted: Sequence[str]) -> tuple[list[Candidate], dict[str, str]]:
    """The candidates of ``wanted`` this engine can run, and why each other one is left out."""
    _, defaults = planning_options()
    known = {c.name: c for c in CANDIDATES}
    out, missing = [], {}
    for name in wanted:
        if name not in known:
            raise SystemExit(f"error usage: unknown candidate {name!r}; choose from {', '.join(known)}")
        c = known[name]
        absent = [k for k, v in c.planning.items() if v and k not in defaults]
        if absent:
            missing[name] = f"serving.planning has no {', '.join(absent)} yet"
        else:
            out.append(c)
    return out, missing


def candidate_config(cfg: Config, candidate: Candidate) -> Config:
    """``cfg`` with the candidate's ``serving.planning`` options (the others keep their defaults)."""
    from serving.settings import ServingSettings

    cls, defaults = planning_options()
    if cls is None:
        return cfg
    settings = cfg.section(ServingSettings)
    values = {k: v for k, v in candidate.planning.items() if k in defaults}
    planning = dataclasses.replace(settings.planning, **values)  # type: ignore[attr-defined]
    return cfg.with_section(dataclasses.replace(settings, planning=planning))  # type: ignore[call-arg]


# -- memory ---------------------------------------------------------------------------------------


class MemorySampler:
    """Peak resident memory (MB) of this process and of the Milvus server, per named phase.

    A thread samples both every ``interval_s`` with psutil (the server with its child processes).
    """

    def __init__(self, server_pid: int | None, interval_s: float = 0.25) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._server = psutil.Process(server_pid) if server_pid else None
        self._phase = "setup"
        self.peaks: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._interval = interval_s
        self._thread.start()

    def _rss(self, proc: Any, *, children: bool) -> float:
        total = 0
        with contextlib.suppress(self._psutil.Error):
            total += proc.memory_info().rss
            for child in proc.children(recursive=True) if children else ():
                with contextlib.suppress(self._psutil.Error):
                    total += child.memory_info().rss
        return total / 2**20

    def sample(self) -> None:
        peak = self.peaks.setdefault(self._phase, {"bench_mb": 0.0, "milvus_mb": 0.0})
        # This process alone: the server it started is one of its children, counted apart.
        peak["bench_mb"] = max(peak["bench_mb"], round(self._rss(self._me, children=False), 1))
        if self._server is not None:
            peak["milvus_mb"] = max(peak["milvus_mb"], round(self._rss(self._server, children=True), 1))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.sample()
        before, self._phase = self._phase, name
        try:
            yield
        finally:
            self.sample()
            self._phase = before

    def set_server(self, pid: int | None) -> None:
        """Sample the server process ``pid`` from now on (after a restart)."""
        self._server = self._psutil.Process(pid) if pid else None

    def set_phase(self, name: str) -> None:
        self.sample()
        self._phase = name

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


# -- building -------------------------------------------------------------------------------------


def run_config(ws: Path, embedder: str, uri: str | None, args: argparse.Namespace) -> Config:
    """One run's config: its workspace and chDB files, the Milvus server at ``uri`` with HNSW."""
    return Config(
        workspace=ws,
        clickhouse=ClickHouseConfig(chdb_path=str(ws / "chdb")),
        milvus=MilvusConfig(
            uri=uri,
            index_type="HNSW",
            metric_type="IP",
            index_params={"M": args.hnsw_m, "efConstruction": args.hnsw_ef_construction},
            ef=args.ef,
            timeout_s=120.0,
        ),
        embedder=EmbedderConfig(text=embedder, image=embedder),
    )


def corpus_ready(ws: Workspace, docs: int) -> bool:
    """Whether the workspace holds the seed-0 generated corpus of ``docs`` products with its labels."""
    from indexing.corpora import generator_version
    from indexing.corpora.files import corpus_manifest, has_labels

    try:
        m = corpus_manifest(ws, DOMAIN)
    except ProReError:
        return False
    return (
        m.get("rows") == docs
        and m.get("seed") == 0
        and m.get("generator_version") == generator_version(DOMAIN)
        and has_labels(m)
    )


def generate_corpus(ws: Workspace, docs: int, label: str) -> None:
    """What ``prore corpus build ecommerce --size N`` writes: products and their label table."""
    from datetime import UTC, datetime

    from indexing.corpora import generate_labeled, generator_version
    from indexing.corpora.files import write_corpus
    from indexing.corpora.labels import LabeledBatch
    from indexing.corpora.vocab import vocab_fingerprint

    meta = {
        "source": "generated",
        "generator": DOMAIN,
        "generator_version": generator_version(DOMAIN),
        "vocab": vocab_fingerprint(),
        "seed": 0,
        "size": docs,
        "created_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
    }
    report = Progress(f"{label} generate", docs)

    def counted() -> Iterator[LabeledBatch]:
        for batch in generate_labeled(DOMAIN, docs, 0):
            yield batch
            report.add(batch.table.num_rows)

    write_corpus(ws, PRODUCTS, counted(), meta)


class Progress:
    """One log line per tenth of the work, with the rate and the time left."""

    def __init__(self, what: str, total: int, start_at: int = 0) -> None:
        self.what, self.total, self.done = what, total, start_at
        self.start, self.base = time.perf_counter(), start_at
        self.next = start_at + max(total // 10, 1)

    def add(self, n: int) -> None:
        self.done += n
        if self.done >= self.next or self.done >= self.total:
            self.next = self.done + max(self.total // 10, 1)
            elapsed = time.perf_counter() - self.start
            rate = (self.done - self.base) / max(elapsed, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else math.inf
            log(f"{self.what}: {self.done:,}/{self.total:,} docs, {rate:,.0f} docs/s, {left:,.0f} s left")


def ensure_built(cfg: Config, run: Run, memory: MemorySampler) -> dict[str, Any]:
    """Generate the corpus and build the index unless the workspace has them; the build's record.

    A build done by an earlier invocation is reused with the seconds and peaks recorded then.
    """
    from indexing.build import build_index

    ws = Workspace(cfg.workspace)
    record_path = cfg.workspace / BUILD_FILE
    previous: dict[str, Any] = json.loads(record_path.read_text()) if record_path.is_file() else {}
    seconds: dict[str, float] = {}
    if corpus_ready(ws, run.docs):
        log(f"{run.label}: corpus present, reused")
        seconds["generate"] = float(previous.get("seconds", {}).get("generate", math.nan))
    else:
        previous = {}
        log(f"{run.label}: generating {run.docs:,} products")
        with memory.phase("generate"):
            t0 = time.perf_counter()
            generate_corpus(ws, run.docs, run.label)
            seconds["generate"] = time.perf_counter() - t0
        atomic_json(record_path, {"seconds": {"generate": seconds["generate"]}, "memory": memory.peaks})
        previous = json.loads(record_path.read_text())
    log(f"{run.label}: building the index ({run.embedder}, HNSW on the Milvus server)")
    chunks = math.ceil(run.docs / 2000)
    progress = Progress(f"{run.label} index (embed + ClickHouse + Milvus insert)", run.docs)

    def on_chunk(i: int) -> None:
        progress.add(min(2000, run.docs - i * 2000))
        if i == chunks - 1:
            memory.set_phase("index build + BM25")
            log(f"{run.label}: rows written; waiting for Milvus to index them, then BM25")

    memory.set_phase("embed + insert")
    result = build_index(cfg, DOMAIN, progress=sys.stderr.isatty(), on_chunk=on_chunk)
    memory.set_phase("after build")
    log(f"{run.label}: {result.summary()}")
    if (
        result.status == "up_to_date"
        and previous.get("version") == result.version
        and "total" in previous.get("seconds", {})
    ):
        return {**previous, "reused": True}
    t = result.times
    seconds.update(
        clickhouse=t.clickhouse_s, embed=t.embed_s, milvus=t.milvus_s, bm25=t.bm25_s, verify=t.verify_s
    )
    seconds["total"] = sum(v for k, v in seconds.items() if not math.isnan(v))
    peaks = {
        k: v for k, v in memory.peaks.items() if k in ("generate", "embed + insert", "index build + BM25")
    }
    record = {
        "version": result.version,
        "status": result.status,
        "resumed_from_chunk": result.resumed_from_chunk,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "docs_per_s": {k: round(run.docs / v, 1) for k, v in seconds.items() if v and not math.isnan(v)},
        "memory": {**previous.get("memory", {}), **peaks},
        "reused": False,
    }
    atomic_json(record_path, record)
    return record


def atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def ensure_bench(cfg: Config, test: int, run: Run) -> dict[str, Any]:
    """Synthesize the benchmark of this workspace's index unless one with the same sizes exists."""
    from rl.bench import load_manifest
    from rl.bench.synth import SynthConfig, synthesize

    ws = Workspace(cfg.workspace)
    sizes = {"train": 1, "test": test, "ood": 1}
    with contextlib.suppress(ProReError):
        m = load_manifest(ws, DOMAIN)
        index_version = (ws.index_root(DOMAIN) / "CURRENT").read_text().strip()
        if m.get("sizes") == sizes and m.get("seed") == 0 and m.get("index_version") == index_version:
            log(f"{run.label}: benchmark present, reused")
            return m
    log(f"{run.label}: synthesizing the benchmark ({test} test instances)")
    manifest: dict[str, Any] = synthesize(
        cfg, DOMAIN, SynthConfig(sizes=sizes, seed=0, progress=sys.stderr.isatty())
    )
    log(f"{run.label}: benchmark synthesized in {manifest['elapsed_s']:.0f} s")
    return manifest


# -- measuring ------------------------------------------------------------------------------------


def satisfied(engine: Any, ws: Workspace, items: Sequence[tuple[Any, str]]) -> list[bool]:
    """Whether each (condition tree, document id) holds on this corpus: the relevant-set test of
    :mod:`rl.bench.relevance`, for the named documents only (their label rows loaded, one scan per 64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from indexing.corpora.files import read_labels
    from rl.bench.relevance import RelevanceJudge

    if not items:
        return []
    labels = read_labels(ws, DOMAIN)
    if labels is None:
        raise SystemExit("the corpus has no label table; P@1 needs one (a generated corpus)")
    wanted = pa.array(sorted({doc for _, doc in items}), pa.string())
    labels = labels.filter(pc.is_in(labels.column("doc_id"), value_set=wanted))
    handle = engine.handle
    with RelevanceJudge(handle.sql, handle.table, PRODUCTS.table, labels) as judge:
        return [r.has_gold for r in judge.relevant_sets(items)]


def run_quality(engine: Any, programs: Sequence[Any], batch: int = 50) -> tuple[list[Any], float]:
    """Every program's outcome (``execute_many`` in batches, cold caches) and the seconds it took."""
    engine.clear_caches()
    out: list[Any] = []
    t0 = time.perf_counter()
    for start in range(0, len(programs), batch):
        out.extend(engine.execute_many(programs[start : start + batch], k=K))
    return out, time.perf_counter() - t0


def run_latency(engine: Any, by_level: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """Per level: p50 / p95 of one program at a time with every cache cold, and each stage's median."""
    from serving.engine import STAGES

    out: dict[str, Any] = {}
    for level, programs in by_level.items():
        totals: list[float] = []
        stages: dict[str, list[float]] = {s: [] for s in STAGES}
        errors = 0
        for p in programs:
            engine.clear_caches()
            t0 = time.perf_counter()
            try:
                res = engine.execute(p, k=K)
            except ProReError:
                errors += 1
                continue
            totals.append((time.perf_counter() - t0) * 1000)
            for s in STAGES:
                stages[s].append(float(res.timings[s]))
        if not totals:
            out[level] = {"n": 0, "errors": errors}
            continue
        medians = {s: round(statistics.median(v), 3) for s, v in stages.items() if v}
        inner = {s: v for s, v in medians.items() if s != "total"}
        out[level] = {
            "n": len(totals),
            "errors": errors,
            "p50_ms": round(statistics.median(totals), 3),
            "p95_ms": round(percentile(totals, 95), 3),
            "stage_median_ms": medians,
            "limiting_stage": max(inner, key=lambda s: inner[s]) if inner else None,
        }
    return out


def measure(
    cfg: Config, run: Run, bench_ws: Workspace, candidates: Sequence[Candidate], per_level: int
) -> dict[str, Any]:
    """Latency, empty share and P@1 of the benchmark's test split, per candidate."""
    from rl.bench import load_manifest, load_split, tree
    from serving.dsl import parse_program
    from serving.engine import Engine

    instances = load_split(bench_ws, DOMAIN, "test")
    bench_manifest = load_manifest(bench_ws, DOMAIN)
    programs = [parse_program(i.program) for i in instances]
    trees = [tree.from_json(json.loads(i.tree)) for i in instances]
    by_level: dict[str, list[Any]] = {}
    for inst, prog in zip(instances, programs, strict=True):
        if len(by_level.setdefault(inst.level, [])) < per_level:
            by_level[inst.level].append(prog)
    by_level = {lv: by_level[lv] for lv in LEVELS if lv in by_level}
    levels = [i.level for i in instances]
    out: dict[str, Any] = {
        "benchmark": {
            "synthesized_on_docs": bench_manifest.get("corpus_rows"),
            "index_version": bench_manifest.get("index_version"),
            "instances": len(instances),
            "levels": {lv: levels.count(lv) for lv in LEVELS},
            "relevant_n_median_at_synthesis": statistics.median(
                [i.relevant_n for i in instances if i.relevant_n is not None] or [0]
            ),
        },
        "candidates": {},
    }
    tops: dict[str, list[str | None]] = {}
    kept: dict[str, list[Any]] = {}
    for c in candidates:
        log(f"{run.label}: measuring {c.label}")
        engine = Engine.open(candidate_config(cfg, c), DOMAIN)
        try:
            for p in programs[:5]:  # first-call costs (collection loads, model warm-up) are not latency
                with contextlib.suppress(ProReError):
                    engine.execute(p, k=K)
            outcomes, seconds = run_quality(engine, programs)
            latency = run_latency(engine, by_level)
        finally:
            engine.close()
        failed = [isinstance(o, ProReError) for o in outcomes]
        empty = [f or not o.ids for f, o in zip(failed, outcomes, strict=True)]
        tops[c.name] = [None if f or not o.ids else o.ids[0] for f, o in zip(failed, outcomes, strict=True)]
        kept[c.name] = [None if f else o for f, o in zip(failed, outcomes, strict=True)]
        out["candidates"][c.name] = {
            "label": c.label,
            "planning": dict(c.planning),
            "programs": len(programs),
            "errors": sum(failed),
            "error_codes": sorted({o.code for o in outcomes if isinstance(o, ProReError)}),
            "empty_share": round(sum(empty) / max(len(programs), 1), 4),
            "empty_share_by_level": {
                lv: round(sum(e for e, lvl in zip(empty, levels, strict=True) if lvl == lv) / n, 4)
                for lv in LEVELS
                if (n := levels.count(lv))
            },
            "batch_programs_per_s": round(len(programs) / max(seconds, 1e-9), 1),
            "latency": latency,
        }
    # P@1 for every candidate at once: which first results satisfy their request on this corpus; then the
    # break-down by what a program is, and why pure-vector L1 first results miss (bench/scale_diagnosis.py).
    program_traits = [diagnosis.traits(i) for i in instances]
    engine = Engine.open(cfg, DOMAIN)
    try:
        items = [(trees[i], doc) for ids in tops.values() for i, doc in enumerate(ids) if doc is not None]
        verdict = dict(
            zip(
                ((id(t), d) for t, d in items),
                satisfied(engine, Workspace(cfg.workspace), items),
                strict=True,
            )
        )
        for name, ids in tops.items():
            hits = [doc is not None and verdict[(id(trees[i]), doc)] for i, doc in enumerate(ids)]
            records = [
                diagnosis.record(o, h, t["gold"]) for o, h, t in zip(kept[name], hits, program_traits, strict=True)
            ]
            out["candidates"][name]["breakdown"] = diagnosis.breakdown(program_traits, records)
            out["candidates"][name]["misses"] = diagnosis.misses(
                diagnosis.miss_texts(engine.handle, program_traits, records)
            )
    finally:
        engine.close()
    for name, ids in tops.items():
        hits = [doc is not None and verdict[(id(trees[i]), doc)] for i, doc in enumerate(ids)]
        entry = out["candidates"][name]
        entry["p_at_1"] = round(sum(hits) / max(len(hits), 1), 4)
        entry["p_at_1_by_level"] = {
            lv: round(sum(h for h, lvl in zip(hits, levels, strict=True) if lvl == lv) / n, 4)
            for lv in LEVELS
            if (n := levels.count(lv))
        }
    return out


# -- one run, in its own process ------------------------------------------------------------------


def code_fingerprint() -> str:
    """A hash of the engine's and the stores' source as this process imported it, so runs made while
    that code changed can be told apart."""
    import hashlib

    digest = hashlib.sha256()
    for pattern in ("serving/engine/*.py", "serving/settings.py", "serving/dsl/*.py", "indexing/stores/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def worker(args: argparse.Namespace) -> int:
    """Build and measure one (embedder, size) in this process; writes ``result.json`` in its workspace."""
    from indexing.stores import server

    run = Run(args.embedder, args.docs)
    fingerprint = code_fingerprint()
    ws_dir = Path(args.run_workspace)
    ws_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally below stops the server
    srv_dir = server.server_dir(ws_dir)
    log(f"{run.label}: starting the Milvus server (prore stores up) in {srv_dir}")
    t0 = time.perf_counter()
    info = server.start(srv_dir, timeout_s=300)
    started_s = time.perf_counter() - t0
    memory = MemorySampler(info.pid)
    try:
        cfg = run_config(ws_dir, run.embedder, info.uri, args)
        build = ensure_built(cfg, run, memory)
        bench_ws = Workspace(Path(args.bench_from)) if args.bench_from else Workspace(ws_dir)
        if not args.bench_from:
            with memory.phase("benchmark synthesis"):
                ensure_bench(cfg, args.test, run)
        # Measured on a fresh server: every size alike, each collection loaded from its sealed, indexed
        # segments (right after a build the server may still search some segments without their index).
        log(f"{run.label}: restarting the Milvus server before measuring")
        server.stop(srv_dir)
        try:
            info = server.start(srv_dir, port=info.port, timeout_s=300)
        except ProReError:
            info = server.start(srv_dir, timeout_s=300)
        memory.set_server(info.pid)
        cfg = run_config(ws_dir, run.embedder, info.uri, args)
        candidates = [c for c in CANDIDATES if c.name in args.candidates.split(",")]
        with memory.phase("measure"):
            measured = measure(cfg, run, bench_ws, candidates, args.per_level)
        result = {
            "embedder": run.embedder,
            "docs": run.docs,
            "label": run.label,
            "workspace": str(ws_dir),
            "code": fingerprint,
            "milvus": {"server_start_s": round(started_s, 1), **dataclasses.asdict(cfg.milvus)},
            "build": build,
            "memory_peaks_mb": memory.peaks,
            "bench_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "load_avg_1m_at_end": os.getloadavg()[0],
            **measured,
        }
        atomic_json(ws_dir / RESULT_FILE, result)
        log(f"{run.label}: done")
        return 0
    finally:
        memory.close()
        if not args.keep_server:
            server.stop(srv_dir)
            log(f"{run.label}: Milvus server stopped (prore stores down)")


# -- the whole benchmark --------------------------------------------------------------------------


def embed_rate(embedder: str, sample: int = 256) -> float:
    """Products per second the embedder encodes here (every vector field, as the build embeds them)."""
    from indexing.chunks import embed_unique
    from indexing.corpora import generate
    from indexing.embedders import make_embedder

    table = next(generate(DOMAIN, 2048, seed=0, chunk_rows=2048))
    emb = make_embedder(EmbedderConfig(text=embedder, image=embedder), Role.TEXT)
    emb.embed(table.column("title").to_pylist()[:128])  # weights, sessions, export: not throughput
    rows = table.slice(1024, sample)
    t0 = time.perf_counter()
    for f in PRODUCTS.vector_fields:
        embed_unique(emb, rows.column(f).to_pylist())
    return sample / (time.perf_counter() - t0)


def pick_neural_sizes(
    sizes: Sequence[int], rate: float, budget_s: float, built: Callable[[int], bool]
) -> tuple[list[int], dict[str, float]]:
    """The sizes, smallest first, whose embedding (at ``rate`` products/s) fits ``budget_s`` in total;
    sizes already built cost nothing. Returns them and each size's estimated embedding seconds."""
    keep: list[int] = []
    spent = 0.0
    estimate = {size_label(n): round(n / rate, 1) for n in sizes}
    for n in sizes:
        cost = 0.0 if built(n) else n / rate
        if spent + cost > budget_s:
            break
        spent += cost
        keep.append(n)
    return keep, estimate


def power_fit(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of seconds = a * docs**b by least squares in log space; ``b`` 1 with one point."""
    pts = [(n, s) for n, s in points if s and s > 0 and not math.isnan(s)]
    if not pts:
        return None
    if len(pts) == 1:
        n, s = pts[0]
        return s / n, 1.0
    xs, ys = [math.log(n) for n, _ in pts], [math.log(s) for _, s in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - b * mx), b


def extrapolate(results: Sequence[Mapping[str, Any]], docs: int) -> dict[str, Any]:
    """Each build stage's seconds at ``docs`` from a power law fitted to the sizes built (the largest three)."""
    built = sorted(results, key=lambda r: r["docs"])[-3:]
    out: dict[str, Any] = {"from_sizes": [r["docs"] for r in built], "seconds": {}, "exponent": {}}
    for stage in BUILD_STAGES:
        fit = power_fit([(r["docs"], r["build"]["seconds"].get(stage, math.nan)) for r in built])
        if fit is not None:
            a, b = fit
            out["seconds"][stage] = round(a * docs**b, 1)
            out["exponent"][stage] = round(b, 2)
    # The two largest sizes alone: the local growth, which a fit over a wider range can understate.
    if len(built) > 1:
        (n0, r0), (n1, r1) = [(r["docs"], r["build"]["seconds"]) for r in built[-2:]]
        out["seconds_from_last_two"], out["exponent_last_two"] = {}, {}
        for stage in BUILD_STAGES:
            fit = power_fit([(n0, r0.get(stage, math.nan)), (n1, r1.get(stage, math.nan))])
            if fit is not None:
                out["seconds_from_last_two"][stage] = round(fit[0] * docs ** fit[1], 1)
                out["exponent_last_two"][stage] = round(fit[1], 2)
    # The same law for each candidate's p50 per level (a trend of the sizes measured, not a measurement).
    out["p50_ms"] = {}
    for name in dict.fromkeys(n for r in built for n in r["candidates"]):
        per_level = {}
        for lv in LEVELS:
            pts = [(r["docs"], r["candidates"][name]["latency"].get(lv, {}).get("p50_ms") or math.nan)
                   for r in built if name in r["candidates"]]  # fmt: skip
            fit = power_fit(pts) if len(pts) > 1 else None
            if fit is not None:
                per_level[lv] = round(fit[0] * docs ** fit[1], 1)
        out["p50_ms"][name] = per_level
    return out


def estimate_build_s(done: Sequence[Mapping[str, Any]], docs: int) -> float | None:
    """Seconds a build of ``docs`` should take, scaled from the largest size built (per doc, x1.15)."""
    if not done:
        return None
    last = max(done, key=lambda r: r["docs"])
    total = float(last["build"]["seconds"]["total"])
    return total * (docs / last["docs"]) * 1.15


def spawn(run: Run, args: argparse.Namespace, bench_from: Path | None, root: Path) -> int:
    """Run one (embedder, size) in a child process; its exit status. Stops it and its server on exit.

    The child stays in this process group and writes to this terminal: Ctrl-C reaches both."""
    from indexing import processes
    from indexing.stores import server

    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--worker",
        "--embedder", run.embedder, "--docs", str(run.docs), "--run-workspace", str(run.workspace(root)),
        "--test", str(args.test), "--per-level", str(args.per_level), "--candidates", args.candidates_run,
        "--hnsw-m", str(args.hnsw_m), "--hnsw-ef-construction", str(args.hnsw_ef_construction), "--ef", str(args.ef),
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
        try:
            code = worker(args)
        finally:
            exit_process(code)  # chDB may abort in its destructors at interpreter exit
    if args.report:
        if not args.out.is_file():
            raise SystemExit(f"error usage: --report reads {args.out}, which does not exist")
        results = json.loads(args.out.read_text())
        finish(results, args)
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
        "neural": {},
        "runs": [],
        "skipped": [],
    }
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout stops the child and its server too

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
            estimate = estimate_build_s(done[run.embedder], run.docs)
            if args.max_minutes is not None and estimate is not None:
                left = args.max_minutes * 60 - (time.monotonic() - started)
                if estimate > left:
                    log(
                        f"{run.label}: skipped, estimated build {estimate / 60:.0f} min > {left / 60:.0f} min left"
                    )
                    results["skipped"].append({"label": run.label, "embedder": run.embedder, "docs": run.docs,
                                               "why": f"estimated build {estimate:.0f} s > {left:.0f} s left"})  # fmt: skip
                    continue
            log(f"== {run.label}" + (f" (estimated build {estimate / 60:.1f} min)" if estimate else ""))
            code = spawn(run, args, bench_from.get(run.embedder), root)
            result_file = run.workspace(root) / RESULT_FILE
            if code != 0 or not result_file.is_file():
                log(f"{run.label}: failed with exit status {code}")
                failed.add(run.embedder)
                results["skipped"].append({"label": run.label, "embedder": run.embedder, "docs": run.docs,
                                           "why": f"the run failed (exit status {code})"})  # fmt: skip
                continue
            result = json.loads(result_file.read_text())
            result["estimated_build_s"] = round(estimate, 1) if estimate else None
            results["runs"].append(result)
            done[run.embedder].append(result)
            bench_from.setdefault(run.embedder, run.workspace(root))
            finish(results, args)  # partial results survive an interruption
    except (KeyboardInterrupt, SystemExit):
        log("interrupted; writing what was measured")
    finish(results, args)
    print(table(results))
    print(f"wrote {args.out}")
    return 0


def finish(results: dict[str, Any], args: argparse.Namespace) -> None:
    """Ratios, goals and extrapolations from the runs so far; write the JSON and the plots."""
    runs = results["runs"]
    results["ratios"] = ratios(runs)
    results["extrapolated"] = {}
    for e in results["embedders"]:
        mine = [r for r in runs if r["embedder"] == e]
        for skip in results["skipped"]:
            if skip["embedder"] == e and mine:
                results["extrapolated"][skip["label"]] = extrapolate(mine, skip["docs"])
    results["goals"] = goals(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_json(args.out, results)
    if runs:
        results["plots"] = plots(results, args.out.parent, args.out.stem)
        atomic_json(args.out, results)


def ratios(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each run against the smallest size of its embedder: build seconds per doc, p50 per level, P@1, empty share."""
    out = []
    for e in dict.fromkeys(r["embedder"] for r in runs):
        mine = sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])
        base = mine[0]
        for r in mine[1:]:
            row: dict[str, Any] = {"embedder": e, "ratio": f"{size_label(r['docs'])} / {size_label(base['docs'])}",
                                   "docs_ratio": r["docs"] / base["docs"]}  # fmt: skip
            row["build_s_per_doc"] = {
                s: _div(
                    r["build"]["seconds"].get(s, math.nan) / r["docs"],
                    base["build"]["seconds"].get(s, math.nan) / base["docs"],
                )
                for s in BUILD_STAGES
            }
            row["candidates"] = {}
            for name, c in r["candidates"].items():
                b = base["candidates"].get(name)
                if b is None:
                    continue
                row["candidates"][name] = {
                    "p50_ms": {
                        lv: _div(
                            c["latency"].get(lv, {}).get("p50_ms"), b["latency"].get(lv, {}).get("p50_ms")
                        )
                        for lv in LEVELS
                    },
                    "p_at_1": _div(c["p_at_1"], b["p_at_1"]),
                    "empty_share": _div(c["empty_share"], b["empty_share"]),
                }
            out.append(row)
    return out


def _div(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return round(float(a) / float(b), 3)


def goals(results: Mapping[str, Any]) -> dict[str, Any]:
    """Where the two goals stand: p50 <= 50 ms at 1M; P@1 with pushdown at 1M >= 0.95 x P@1 at 5k."""
    runs = results["runs"]
    out: dict[str, Any] = {}
    for e in results["embedders"]:
        mine = sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])
        if not mine:
            continue
        top, base = mine[-1], mine[0]
        at = size_label(top["docs"])
        reached_1m = top["docs"] >= 1_000_000
        lat: dict[str, Any] = {
            "goal": f"p50 <= {GOAL_P50_MS:.0f} ms at 1M",
            "measured_at": at,
            "reached_1M": reached_1m,
        }
        for name, c in top["candidates"].items():
            per_level = {
                lv: c["latency"][lv]["p50_ms"] for lv in LEVELS if "p50_ms" in c["latency"].get(lv, {})
            }
            if not per_level:
                continue
            worst = max(per_level, key=lambda lv: per_level[lv])
            lat[name] = {
                "p50_ms": per_level,
                "worst_level": worst,
                "limiting_stage": c["latency"][worst].get("limiting_stage"),
                "met": reached_1m and all(v <= GOAL_P50_MS for v in per_level.values()),
            }
        quality: dict[str, Any] = {
            "goal": f"P@1 with pushdown at 1M >= {GOAL_P1_RATIO} x P@1 at {size_label(base['docs'])}",
            "measured_at": at,
            "reached_1M": reached_1m,
        }
        for name in ("pushdown", "fixed"):
            if name in top["candidates"] and name in base["candidates"]:
                p_top, p_base = top["candidates"][name]["p_at_1"], base["candidates"][name]["p_at_1"]
                ratio = _div(p_top, p_base)
                quality[name] = {
                    "p_at_1": p_top,
                    "p_at_1_smallest": p_base,
                    "p_at_1_smallest_fixed": base["candidates"].get("fixed", {}).get("p_at_1"),
                    "ratio": ratio,
                    "met": reached_1m and name == "pushdown" and ratio is not None and ratio >= GOAL_P1_RATIO,
                }
        if "pushdown" not in top["candidates"]:
            quality["pushdown"] = "not measured: the engine has no serving.planning.pushdown yet"
        out[e] = {"latency": lat, "quality": quality}
    return out


# -- report ---------------------------------------------------------------------------------------


def plots(results: Mapping[str, Any], where: Path, stem: str) -> list[str]:
    """Build seconds per stage, p50 per level and empty share / P@1 against corpus size, as PNGs."""
    from indexing.errors import require

    matplotlib: Any = require("matplotlib", "eval")
    matplotlib.use("Agg", force=True)
    plt: Any = require("matplotlib.pyplot", "eval")
    require("matplotlib.ticker", "eval")
    runs = results["runs"]
    embedders = list(dict.fromkeys(r["embedder"] for r in runs))
    styles = ["-", "--", ":", "-."]
    written = []

    def series(e: str) -> list[Mapping[str, Any]]:
        return sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])

    sizes = sorted({r["docs"] for r in runs})

    def size_axis(ax: Any) -> None:
        ax.set_xscale("log")
        ax.set_xticks(sizes, [size_label(n) for n in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("products")

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    try:
        for j, e in enumerate(embedders):
            rs = series(e)
            for i, stage in enumerate(BUILD_STAGES):
                ys = [r["build"]["seconds"].get(stage, math.nan) for r in rs]
                ax.plot([r["docs"] for r in rs], ys, styles[j % 4], marker="osD^"[j % 4], color=f"C{i}",
                        label=f"{STAGE_LABELS[stage]} ({e})")  # fmt: skip
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel("seconds")
        ax.set_title("Index build time per stage")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = where / f"{stem}_build.png"
        fig.savefig(path)
        written.append(str(path))
    finally:
        plt.close(fig)

    names = list(results["candidates"])
    fig, axes = plt.subplots(1, len(LEVELS), figsize=(10, 3.6), dpi=110, sharey=True)
    try:
        for ax, lv in zip(axes, LEVELS, strict=True):
            for j, e in enumerate(embedders):
                rs = series(e)
                for i, name in enumerate(names):
                    pts = [(r["docs"], r["candidates"][name]["latency"].get(lv, {}).get("p50_ms"))
                           for r in rs if name in r["candidates"]]  # fmt: skip
                    pts = [(x, y) for x, y in pts if y is not None]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), styles[j % 4], marker="osD^"[j % 4], color=f"C{i}",
                                label=f"{results['candidates'][name]['label']} ({e})")  # fmt: skip
            ax.axhline(GOAL_P50_MS, color="grey", lw=0.8, ls="--")
            size_axis(ax)
            ax.set_title(f"{lv} p50")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("ms (cold caches)")
        axes[-1].legend(fontsize=6)
        fig.tight_layout()
        path = where / f"{stem}_latency.png"
        fig.savefig(path)
        written.append(str(path))
    finally:
        plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    try:
        for ax, key, title in ((axes[0], "empty_share", "share of programs returning nothing"),
                               (axes[1], "p_at_1", "P@1 (first result satisfies the request)")):  # fmt: skip
            for j, e in enumerate(embedders):
                rs = series(e)
                for i, name in enumerate(names):
                    pts = [(r["docs"], r["candidates"][name][key]) for r in rs if name in r["candidates"]]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), styles[j % 4], marker="osD^"[j % 4], color=f"C{i}",
                                label=f"{results['candidates'][name]['label']} ({e})")  # fmt: skip
            size_axis(ax)
            ax.set_ylim(0, 1)
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[1].legend(fontsize=6)
        fig.tight_layout()
        path = where / f"{stem}_quality.png"
        fig.savefig(path)
        written.append(str(path))
    finally:
        plt.close(fig)
    return written


def _f(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(results: Mapping[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load average at start "
        f"{m['load_avg_1m_at_start']:.1f}; Milvus standalone server, HNSW "
        f"M={results['hnsw']['M']} efConstruction={results['hnsw']['efConstruction']} ef={results['hnsw']['ef']}, K={K}",
    ]
    for e, n in results["neural"].items():
        lines.append(
            f"{e}: {n['products_per_s']} products/s measured; sizes within {n['budget_min']:.0f} min of embedding: "
            f"{', '.join(size_label(s) for s in n['sizes']) or 'none'}"
        )
    lines += ["", "build seconds per stage (reused = built by an earlier invocation) and peak RSS (MB)"]
    lines.append(
        f"{'run':<24} " + " ".join(f"{s:>10}" for s in BUILD_STAGES) + f" {'bench MB':>9} {'milvus MB':>9}"
    )
    for r in results["runs"]:
        secs = r["build"]["seconds"]
        peaks = r["memory_peaks_mb"] | r["build"].get("memory", {})
        bench_mb = max((p.get("bench_mb", 0) for p in peaks.values()), default=0)
        milvus_mb = max((p.get("milvus_mb", 0) for p in peaks.values()), default=0)
        tag = " (reused)" if r["build"].get("reused") else ""
        lines.append(
            f"{r['label'] + tag:<24} "
            + " ".join(f"{_f(secs.get(s)):>10}" for s in BUILD_STAGES)
            + f" {bench_mb:>9.0f} {milvus_mb:>9.0f}"
        )
    lines += ["", "latency per level, ms, one program at a time, caches cold: p50 / p95 (limiting stage)"]
    lines.append(f"{'run':<24} {'candidate':<22} " + " ".join(f"{lv:>26}" for lv in LEVELS))
    for r in results["runs"]:
        for c in r["candidates"].values():
            cells = []
            for lv in LEVELS:
                x = c["latency"].get(lv, {})
                cells.append(
                    f"{_f(x.get('p50_ms'))} / {_f(x.get('p95_ms'))} ({x.get('limiting_stage') or '-'})"
                )
            lines.append(f"{r['label']:<24} {c['label']:<22} " + " ".join(f"{cell:>26}" for cell in cells))
    lines += ["", "benchmark programs (test split, synthesized on the smallest size): returning nothing, P@1"]
    lines.append(f"{'run':<24} {'candidate':<22} {'empty':>7} {'errors':>7} {'P@1':>7} {'P@1 L1/L2/L3':>20}")
    for r in results["runs"]:
        for c in r["candidates"].values():
            by = "/".join(_f(c["p_at_1_by_level"].get(lv), ".2f") for lv in LEVELS)
            lines.append(
                f"{r['label']:<24} {c['label']:<22} {c['empty_share']:>7.1%} {c['errors']:>7} "
                f"{c['p_at_1']:>7.3f} {by:>20}"
            )
    for e in dict.fromkeys(r["embedder"] for r in results["runs"]):
        mine = [r for r in results["runs"] if r["embedder"] == e]
        for name in results["candidates"]:
            lines += diagnosis.table(mine, name)
    if results["ratios"]:
        lines += ["", "ratios against the smallest size (build: seconds per doc; p50: ms; >1 = more)"]
        lines.append(
            f"{'embedder':<18} {'ratio':<12} {'build total/doc':>15} {'embed/doc':>10} {'milvus/doc':>10}"
            f" {'candidate':<22} {'p50 L1':>7} {'p50 L2':>7} {'p50 L3':>7} {'P@1':>6}"
        )
        for q in results["ratios"]:
            b = q["build_s_per_doc"]
            for name, c in q["candidates"].items() or {"-": {}}.items():
                p = c.get("p50_ms", {})
                lines.append(
                    f"{q['embedder']:<18} {q['ratio']:<12} {_f(b['total'], '.2f'):>15} {_f(b['embed'], '.2f'):>10}"
                    f" {_f(b['milvus'], '.2f'):>10} {results['candidates'].get(name, {}).get('label', name):<22}"
                    f" {_f(p.get('L1'), '.2f'):>7} {_f(p.get('L2'), '.2f'):>7} {_f(p.get('L3'), '.2f'):>7}"
                    f" {_f(c.get('p_at_1'), '.2f'):>6}"
                )
    if results["skipped"]:
        lines += ["", "not run"]
        for s in results["skipped"]:
            ex = results["extrapolated"].get(s["label"])
            note = ""
            if ex and ex["seconds"]:
                parts = ", ".join(f"{k} {v:,.0f}" for k, v in ex["seconds"].items())
                note = f"; extrapolated build s from {', '.join(size_label(n) for n in ex['from_sizes'])}: {parts}"
                if ex.get("seconds_from_last_two"):
                    last = ", ".join(f"{k} {v:,.0f}" for k, v in ex["seconds_from_last_two"].items())
                    note += f"; from the two largest alone: {last}"
            lines.append(f"  {s['label']}: {s['why']}{note}")
            for name, per_level in (ex or {}).get("p50_ms", {}).items():
                if per_level:
                    trend = "/".join(_f(per_level.get(lv)) for lv in LEVELS)
                    label = results["candidates"].get(name, {}).get("label", name)
                    lines.append(f"    p50 L1/L2/L3 trend at {size_label(s['docs'])}, {label}: {trend} ms")
    codes = sorted({r.get("code") for r in results["runs"]} - {None})
    if len(codes) > 1:
        lines += [
            "",
            f"WARNING: the engine or store code changed between runs (fingerprints {', '.join(codes)})",
        ]
    if results["candidates_left_out"]:
        lines += [
            "",
            "candidates left out: "
            + "; ".join(f"{k} ({v})" for k, v in results["candidates_left_out"].items()),
        ]
    lines.append("")
    for e, g in results["goals"].items():
        lat, q = g["latency"], g["quality"]
        for name in results["candidates"]:
            if name in lat:
                x = lat[name]
                lines.append(
                    f"goal {lat['goal']} [{e}, {results['candidates'][name]['label']}]: at {lat['measured_at']} "
                    f"p50 L1/L2/L3 {'/'.join(_f(x['p50_ms'].get(lv)) for lv in LEVELS)} ms, worst {x['worst_level']} "
                    f"limited by {x['limiting_stage']}: "
                    + (("met" if x["met"] else "NOT met") if lat["reached_1M"] else "open, 1M not measured")
                )
        for name in ("pushdown", "fixed"):
            x = q.get(name)
            if isinstance(x, dict):
                lines.append(
                    f"goal {q['goal']} [{e}, {name}]: at {q['measured_at']} P@1 {x['p_at_1']:.3f} vs "
                    f"{x['p_at_1_smallest']:.3f} = {_f(x['ratio'], '.2f')}x"
                    + (
                        " (reference)"
                        if name != "pushdown"
                        else (": met" if x["met"] else ": NOT met")
                        if q["reached_1M"]
                        else ": open, 1M not measured"
                    )
                )
            elif isinstance(x, str):
                lines.append(f"goal {q['goal']} [{e}]: {x}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
