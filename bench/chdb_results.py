"""How the embedded ClickHouse (chDB) hands a program's rows to Python: result formats side by side.

The engine's SQL stage on chDB is the query plus the transfer of its result into Arrow. The store reads
results as Parquet (it keeps ClickHouse's types: ``DateTime('UTC')`` arrives as a timestamp, where
ClickHouse's Arrow output writes it as ``UInt32``). This script times, in one run and on the same
statements, the candidates a store could use:

* ``parquet`` with chDB's default compression (what the store uses), ``parquet none`` without it (the
  bytes never leave the process);
* ``arrow`` (lz4 frames by default) and ``arrow none``;
* ``tsv``, which parses nothing into types: a floor for the transfer, not a candidate.

If the transfer were a large share of the stage, ``tsv`` would be far below ``parquet``. Measured here it
is not (0.75-0.88 under load): the query itself is the stage's cost, so the store keeps Parquet and its
types.

The statements are the engine's shapes with bound id sets (``id IN {text_1: Array(String)}``) over a
corpus of ``--docs`` products built with the hashing embedder in a temporary workspace: a filter with
one id set (L1), two (L2), and a nested subquery with ``ORDER BY ... LIMIT`` (L3). Each candidate runs
every statement with ``--repeats`` id sets per round; for each statement and id set the candidates run
back to back in a shuffled order, so load on a shared machine falls on all of them alike. The table gives
the median per statement shape and its ratio to ``parquet``. Writes ``bench/results/chdb_results.json``.

    .venv/bin/python bench/chdb_results.py [--docs 3000] [--rounds 5] [--repeats 100]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from common import RESULTS, ROOT, machine, run_main, write_results

from indexing.build import build_index
from indexing.config import ClickHouseConfig, Config, EmbedderConfig
from indexing.corpora import generate
from indexing.corpora.files import write_corpus
from indexing.schema import PRODUCTS
from indexing.stores.clickhouse import chdb_session
from indexing.workspace import Workspace

OUT = RESULTS / "chdb_results.json"
SHAPES = {
    "L1": "SELECT id FROM {t} AS products WHERE price < 300 AND id IN {{text_1: Array(String)}}",
    "L2": "SELECT id FROM {t} AS products WHERE (brand = 'Sony' OR rating > 3) AND id IN {{text_1: Array(String)}} "
          "AND NOT (id IN {{text_2: Array(String)}})",
    "L3": "SELECT id FROM {t} AS products WHERE rating > 2 AND id IN (SELECT id FROM {t} AS products WHERE "
          "price < 400 AND id IN {{text_1: Array(String)}} ORDER BY price LIMIT 40) AND id IN {{image_3: Array(String)}}",
}  # fmt: skip
Reader = Callable[[Any], Any]
CANDIDATES: dict[str, tuple[str, str, Reader]] = {
    "parquet": ("Parquet", "", lambda r: pq.read_table(io.BytesIO(r.bytes()))),
    "parquet none": ("Parquet", ", output_format_parquet_compression_method = 'none'",
                     lambda r: pq.read_table(io.BytesIO(r.bytes()))),
    "arrow": ("Arrow", "", lambda r: ipc.open_file(pa.py_buffer(r.bytes())).read_all()),
    "arrow none": ("Arrow", ", output_format_arrow_compression_method = 'none'",
                   lambda r: ipc.open_file(pa.py_buffer(r.bytes())).read_all()),
    "tsv": ("TabSeparated", "", lambda r: r.bytes().split(b"\n")),
}  # fmt: skip


def _index(root: Path, docs: int) -> tuple[Any, str]:
    """A products index of ``docs`` documents (hashing embedder) and its physical ClickHouse table."""
    cfg = Config(workspace=root, clickhouse=ClickHouseConfig(chdb_path=str(root / "chdb")),
                 embedder=EmbedderConfig(text="hashing", image="hashing"))  # fmt: skip
    meta = {"generator": PRODUCTS.domain, "size": docs, "seed": 0}
    write_corpus(Workspace(root), PRODUCTS, generate(PRODUCTS.domain, docs, seed=0), meta)
    build_index(cfg, PRODUCTS.domain, progress=False)
    session = chdb_session(root / "chdb")
    rows = session.query("SELECT name FROM system.tables WHERE database = 'prore' "
                         "AND name LIKE 'products__v%' ORDER BY name DESC LIMIT 1", "CSV")  # fmt: skip
    return session, "prore." + rows.bytes().decode().strip().strip('"')


def _params(docs: int, rng: random.Random) -> dict[str, str]:
    """Three id sets of 20 ids each, written as ClickHouse array literals (as the store binds them)."""
    width = max(5, len(str(docs - 1)))
    out = {}
    for name in ("text_1", "text_2", "image_3"):
        ids = rng.sample(range(docs), 20)
        out[name] = "[" + ",".join(f"'P{i:0{width}d}'" for i in ids) + "]"
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "docs": args.docs, "rounds": args.rounds,
                               "repeats": args.repeats, "ms": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="chdb-results-") as tmp:
        session, table = _index(Path(tmp), args.docs)
        rng = random.Random(0)
        params = [_params(args.docs, rng) for _ in range(args.repeats)]
        times: dict[tuple[str, str], list[float]] = {}
        order = list(CANDIDATES)
        for _ in range(args.rounds):
            for p in params:
                for shape, sql in SHAPES.items():
                    rng.shuffle(order)  # every candidate runs the same statement back to back, in a new order
                    for cand in order:
                        fmt, extra, read = CANDIDATES[cand]
                        text = sql.format(t=table) + "\nSETTINGS readonly = 1" + extra
                        start = time.perf_counter()
                        read(session.query(text, fmt, params=p))
                        times.setdefault((cand, shape), []).append((time.perf_counter() - start) * 1000)
    base = {s: statistics.median(times["parquet", s]) for s in SHAPES}
    print(
        f"chDB result transfer, {args.docs:,} products, median ms per statement "
        f"({args.rounds} rounds x {args.repeats}); ratio to parquet"
    )
    print(f"{'candidate':14s}" + "".join(f"{s:>16s}" for s in SHAPES))
    for cand in CANDIDATES:
        cells = []
        for s in SHAPES:
            med = statistics.median(times[cand, s])
            results["ms"].setdefault(cand, {})[s] = {"p50": round(med, 3), "ratio": round(med / base[s], 3)}
            cells.append(f"{med:8.2f} ({med / base[s]:.2f})")
        print(f"{cand:14s}" + "".join(f"{c:>16s}" for c in cells))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3000, help="products in the index (default 3000)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds of every candidate (default 5)"
    )
    parser.add_argument(
        "--repeats", type=int, default=100, help="id sets per statement and round (default 100)"
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"JSON report (default {OUT.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    print(f"wrote {write_results(args.out, run(args))}")
    return 0


if __name__ == "__main__":
    run_main(main)
