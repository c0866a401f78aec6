"""One scaling run (an embedder at a corpus size) from start to end, in a process of its own: its Milvus server
started, the corpus, index and benchmark built, the server restarted, every candidate measured, and
``result.json`` written in the run's workspace."""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import ProReError
from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
from indexing.workspace import Workspace
from rl.eval.scale.build import ensure_bench, ensure_built
from rl.eval.scale.measure import measure
from rl.eval.scale.memory import MemorySampler
from rl.eval.scale.runs import CANDIDATES, RESULT_FILE, Run, atomic_json, log
from serving.settings import PlanningMode, PlanningOptions, ServingSettings

SOURCE = Path(__file__).resolve().parents[3]
"""Where the packages are (the repository in a checkout)."""


@dataclass(frozen=True)
class Options:
    """What every run of one benchmark shares (``bench/scale.py``'s options)."""

    test: int
    """Test instances of the benchmark synthesized on the smallest size."""
    per_level: int
    """Programs per level timed one at a time."""
    candidates: tuple[str, ...]
    """Names of the :data:`~rl.eval.scale.runs.CANDIDATES` measured."""
    hnsw_m: int
    hnsw_ef_construction: int
    ef: int
    """HNSW's search ``ef`` (raised to k)."""
    keep_server: bool = False
    """Leave the run's Milvus server running at the end."""
    kept_under: PlanningMode = "default"
    """Planning mode (``serving.planning.mode``) the benchmark is synthesized under."""


def run_config(ws: Path, embedder: str, uri: str | None, options: Options) -> Config:
    """One run's config: its workspace and chDB files, the Milvus server at ``uri`` with HNSW, and the planning
    mode the benchmark is kept under (each measured candidate sets its own, :func:`~rl.eval.scale.runs.candidate_config`)."""
    cfg = Config(
        workspace=ws,
        clickhouse=ClickHouseConfig(chdb_path=str(ws / "chdb")),
        milvus=MilvusConfig(
            uri=uri,
            index_type="HNSW",
            metric_type="IP",
            index_params={"M": options.hnsw_m, "efConstruction": options.hnsw_ef_construction},
            ef=options.ef,
            timeout_s=120.0,
        ),
        embedder=EmbedderConfig(text=embedder, image=embedder),
    )
    serving = cfg.section(ServingSettings)
    planning = PlanningOptions(mode=options.kept_under)
    return cfg.with_section(dataclasses.replace(serving, planning=planning))


def code_fingerprint() -> str:
    """A hash of the engine's and the stores' source as this process imported it, so runs made while
    that code changed can be told apart."""
    import hashlib

    digest = hashlib.sha256()
    for pattern in ("serving/engine/*.py", "serving/settings.py", "serving/dsl/*.py", "indexing/stores/*.py"):
        for path in sorted(SOURCE.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def worker(run: Run, ws_dir: Path, options: Options, bench_from: Path | None = None) -> int:
    """Build and measure ``run`` in this process, in the workspace ``ws_dir``; writes ``result.json`` there.

    The benchmark is ``bench_from``'s (a smaller size's workspace), or synthesized here without one."""
    from indexing.stores import server

    fingerprint = code_fingerprint()
    ws_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally below stops the server
    srv_dir = server.server_dir(ws_dir)
    log(f"{run.label}: starting the Milvus server (prore stores up) in {srv_dir}")
    t0 = time.perf_counter()
    info = server.start(srv_dir, timeout_s=300)
    started_s = time.perf_counter() - t0
    memory = MemorySampler(info.pid)
    try:
        cfg = run_config(ws_dir, run.embedder, info.uri, options)
        build = ensure_built(cfg, run, memory)
        bench_ws = Workspace(bench_from) if bench_from else Workspace(ws_dir)
        if not bench_from:
            with memory.phase("benchmark synthesis"):
                ensure_bench(cfg, options.test, run)
        # Measured on a fresh server: every size alike, each collection loaded from its sealed, indexed
        # segments (right after a build the server may still search some segments without their index).
        log(f"{run.label}: restarting the Milvus server before measuring")
        server.stop(srv_dir)
        try:
            info = server.start(srv_dir, port=info.port, timeout_s=300)
        except ProReError:
            info = server.start(srv_dir, timeout_s=300)
        memory.set_server(info.pid)
        cfg = run_config(ws_dir, run.embedder, info.uri, options)
        candidates = [c for c in CANDIDATES if c.name in options.candidates]
        with memory.phase("measure"):
            measured = measure(cfg, run, bench_ws, candidates, options.per_level)
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
        if not options.keep_server:
            server.stop(srv_dir)
            log(f"{run.label}: Milvus server stopped (prore stores down)")
