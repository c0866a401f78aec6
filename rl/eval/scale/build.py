"""A scaling run's corpus, index and benchmark: generated, built and synthesized once per workspace, then reused
(an interrupted index build resumes)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

from core.errors import ProReError
from indexing.config import Config
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace
from rl.eval.scale.memory import MemorySampler
from rl.eval.scale.runs import BUILD_FILE, DOMAIN, Run, atomic_json, log


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


def ensure_bench(cfg: Config, test: int, run: Run) -> dict[str, Any]:
    """Synthesize the benchmark of this workspace's index, under ``cfg``'s planning, unless one with the same
    sizes, index and planning exists."""
    from rl.datasets import load_manifest
    from rl.datasets.store import planning_mismatch
    from rl.datasets.synth import SynthConfig, synthesize
    from serving.settings import ServingSettings

    ws = Workspace(cfg.workspace)
    sizes = {"train": 1, "test": test, "ood": 1}
    planning = dataclasses.asdict(cfg.section(ServingSettings).planning)
    with contextlib.suppress(ProReError):
        m = load_manifest(ws, DOMAIN)
        index_version = (ws.index_root(DOMAIN) / "CURRENT").read_text().strip()
        same = m.get("sizes") == sizes and m.get("seed") == 0 and m.get("index_version") == index_version
        if same and planning_mismatch(m, planning) is None:
            log(f"{run.label}: benchmark present, reused")
            return m
    log(f"{run.label}: synthesizing the benchmark ({test} test instances)")
    manifest: dict[str, Any] = synthesize(
        cfg, DOMAIN, SynthConfig(sizes=sizes, seed=0, progress=sys.stderr.isatty())
    )
    log(f"{run.label}: benchmark synthesized in {manifest['elapsed_s']:.0f} s")
    return manifest
