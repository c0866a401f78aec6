"""Index build throughput: documents per second per stage, side by side across configurations.

Stages: generate (seeded corpus generator + parquet write), embed, ClickHouse write (chDB),
Milvus write (Milvus Lite upserts), BM25 (bm25s over every text and image field) and the total.
Configurations: the hashing embedder at 5k and 100k documents (how the stores scale) and MiniLM at
5k (what a neural model costs). Ratios compare configurations stage by stage.

Run ``python bench/index_build.py`` (``--quick`` for a small smoke run). Prints a table and writes
``bench/results/index_build.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import machine  # noqa: E402

from indexing.build import build_index  # noqa: E402
from indexing.config import ClickHouseConfig, Config, EmbedderConfig  # noqa: E402
from indexing.corpora import generate  # noqa: E402
from indexing.corpora.files import write_corpus  # noqa: E402
from indexing.embedders import make_embedder  # noqa: E402
from indexing.schema import DOMAINS, Role, schema_for  # noqa: E402
from indexing.workspace import Workspace  # noqa: E402

STAGES = ("generate", "embed", "clickhouse", "milvus", "bm25", "total")
DEFAULT_OUT = ROOT / "bench" / "results" / "index_build.json"


@dataclass(frozen=True)
class Run:
    """One configuration: an embedder and a corpus size."""

    embedder: str
    docs: int

    @property
    def label(self) -> str:
        size = f"{self.docs // 1000}k" if self.docs % 1000 == 0 else str(self.docs)
        return f"{self.embedder} {size}"


def run_one(cfg: Config, domain: str, run: Run, batch_rows: int) -> dict[str, Any]:
    """Generate the corpus, build the index, return seconds and docs/s per stage."""
    cfg = cfg.replace(embedder=EmbedderConfig(text=run.embedder, image=run.embedder))
    schema = schema_for(domain)
    # One-time costs (vocabulary tables, model weights) are not throughput: pay them untimed.
    for _ in generate(domain, 10, seed=1):
        pass
    make_embedder(cfg.embedder, Role.TEXT).embed(["warm up"])
    t0 = time.perf_counter()
    write_corpus(Workspace(cfg.workspace), schema, generate(domain, run.docs, seed=0), {"generator": domain, "size": run.docs})
    generate_s = time.perf_counter() - t0
    result = build_index(cfg, domain, batch_rows=batch_rows, progress=None)
    if result.status != "built" or result.rows != run.docs:
        raise SystemExit(f"unexpected build result for {domain} {run.label}: {result}")
    t = result.times
    seconds = {
        "generate": generate_s,
        "embed": t.embed_s,
        "clickhouse": t.clickhouse_s,
        "milvus": t.milvus_s,
        "bm25": t.bm25_s,
    }
    seconds["total"] = sum(seconds.values()) + t.verify_s
    return {
        "domain": domain,
        "config": run.label,
        "embedder": run.embedder,
        "docs": run.docs,
        "vector_fields": len(schema.vector_fields),
        "version": result.version,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "docs_per_s": {k: round(run.docs / v, 1) if v > 0 else None for k, v in seconds.items()},
    }


def ratios(rows: list[dict[str, Any]], runs: list[Run]) -> list[dict[str, Any]]:
    """Per domain and stage: seconds per document of a configuration over that of the hashing baseline."""
    base, big, neural = runs
    out = []
    for domain in dict.fromkeys(r["domain"] for r in rows):
        by = {r["config"]: r for r in rows if r["domain"] == domain}
        for num, den, what in ((big, base, "time per doc, larger corpus / smaller"), (neural, base, "time per doc, MiniLM / hashing")):
            if num.label not in by or den.label not in by:
                continue
            a, b = by[num.label], by[den.label]
            per_doc = {
                s: round((a["seconds"][s] / a["docs"]) / (b["seconds"][s] / b["docs"]), 2) if b["seconds"][s] > 0 else None
                for s in STAGES
            }
            out.append({"domain": domain, "ratio": f"{num.label} / {den.label}", "meaning": what, "per_doc": per_doc})
    return out


def table(rows: list[dict[str, Any]], rats: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [
        f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, "
        f"load average at start {info['load_avg_1m_at_start']}",
        "",
        "docs/s per stage (higher is better)",
        f"{'domain':<10} {'config':<13} {'docs':>7} " + " ".join(f"{s:>11}" for s in STAGES),
    ]
    for r in rows:
        cells = " ".join(f"{(r['docs_per_s'][s] or 0):>11,.0f}" for s in STAGES)
        lines.append(f"{r['domain']:<10} {r['config']:<13} {r['docs']:>7} {cells}")
    if rats:
        lines += ["", "ratios of time per document (1.00 = same cost per doc; >1 = slower per doc)"]
        lines.append(f"{'domain':<10} {'ratio':<28} " + " ".join(f"{s:>11}" for s in STAGES))
        for q in rats:
            cells = " ".join(f"{(q['per_doc'][s] or 0):>11.2f}" for s in STAGES)
            lines.append(f"{q['domain']:<10} {q['ratio']:<28} {cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Index build throughput (docs/s per stage) with the hashing embedder at two sizes and MiniLM.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (1k/5k hashing, 300 MiniLM): a smoke run")
    parser.add_argument("--domains", default=",".join(DOMAINS), help="comma-separated domains (default: all)")
    parser.add_argument("--small", type=int, help="hashing corpus size (default 5000; quick 1000)")
    parser.add_argument("--large", type=int, help="larger hashing corpus size (default 100000; quick 5000)")
    parser.add_argument("--minilm", type=int, help="MiniLM corpus size (default 5000; quick 300; 0 skips)")
    parser.add_argument("--batch-rows", type=int, default=2000, help="rows per build chunk (default 2000)")
    parser.add_argument("--workspace", help="workspace directory (default: a fresh temporary one)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"JSON output (default {DEFAULT_OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    small = args.small or (1000 if args.quick else 5000)
    large = args.large or (5000 if args.quick else 100_000)
    neural = args.minilm if args.minilm is not None else (300 if args.quick else 5000)
    domains = [schema_for(d).domain for d in args.domains.split(",") if d]
    runs = [Run("hashing", small), Run("hashing", large), Run("minilm", neural)]
    info = machine()
    workspace = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="prore-bench-"))
    cfg = Config(workspace=workspace, clickhouse=ClickHouseConfig(chdb_path=str(workspace / "chdb")))
    rows = []
    for domain in domains:
        for run in runs:
            if run.docs <= 0:
                continue
            print(f"... {domain} {run.label}", file=sys.stderr, flush=True)
            rows.append(run_one(cfg, domain, run, args.batch_rows))
    rats = ratios(rows, runs)
    print(table(rows, rats, info))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "quick": args.quick, "runs": rows, "ratios": rats}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
