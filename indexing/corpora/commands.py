"""``prore corpus``: build a generated corpus, load a real one, show what the workspace holds.

Examples::

    prore corpus build ecommerce --size 3000 --seed 0
    prore corpus load esci --products shopping_queries_dataset_products.parquet \\
        --reviews Electronics.jsonl.gz --meta meta_Electronics.jsonl.gz --limit 50000
    prore corpus load enron --maildir maildir/
    prore corpus show email --n 3
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NoReturn

import pyarrow as pa
from tqdm import tqdm

from indexing.config import Config
from indexing.corpora import generate_labeled, generator_version
from indexing.corpora.enron import iter_enron
from indexing.corpora.esci import iter_esci
from indexing.corpora.files import corpus_manifest, iter_corpus, read_extras, write_corpus
from indexing.corpora.labels import LabeledBatch
from indexing.corpora.loading import LOADER_VERSION, LoadStats
from indexing.corpora.report import read_report, report_lines
from indexing.corpora.vocab import vocab_fingerprint
from indexing.schema import DOMAINS, EMAILS, PRODUCTS, CorpusSchema, schema_for
from indexing.workspace import Workspace

SHOW_WIDTH = 160
_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000}


class _Parser(argparse.ArgumentParser):
    """Reports a usage mistake on one line (``error usage: ...``) and exits 2, as a ProReError does."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error usage: {message} (see: {self.prog} --help)\n")


def _count(text: str) -> int:
    """A document count such as ``3000``, ``100k``, ``1M`` or ``1_000_000``."""
    m = re.fullmatch(r"\s*(\d[\d_]*)\s*([kKmM]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a count like 3000, 100k or 1M, got {text!r}")
    value = int(m.group(1).replace("_", "")) * _SUFFIX[m.group(2).lower()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive count, got {text!r}")
    return value


def _seed(text: str) -> int:
    if not re.fullmatch(r"\d{1,18}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected a non-negative integer seed, got {text!r}")
    return int(text)


def _sample_size(text: str) -> int:
    if not re.fullmatch(r"\d{1,4}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected 0 to 9999 documents, got {text!r}")
    return int(text)


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _write(
    cfg: Config,
    schema: CorpusSchema,
    batches: Iterable[pa.Table | LabeledBatch],
    meta: dict[str, Any],
    total: int | None,
    stats: LoadStats | None = None,
) -> int:
    """Write a corpus with a progress bar and print one summary line."""
    ws = Workspace(cfg.workspace)
    start = time.perf_counter()
    with tqdm(
        total=total, unit="docs", unit_scale=True, desc=schema.domain, disable=None, file=sys.stderr
    ) as bar:

        def counted() -> Iterator[pa.Table | LabeledBatch]:
            for batch in batches:
                bar.update((batch.table if isinstance(batch, LabeledBatch) else batch).num_rows)
                yield batch

        manifest = write_corpus(ws, schema, counted(), meta, stats)
    seconds = max(time.perf_counter() - start, 1e-9)
    rows = int(manifest["rows"])
    dropped = sum(stats.dropped.values()) if stats is not None else 0
    note = (
        f", dropped {dropped:,} ({', '.join(f'{k}: {v:,}' for k, v in sorted(stats.dropped.items()))})"
        if stats and dropped
        else ""
    )
    print(
        f"wrote {rows:,} {schema.table} to {ws.corpus_dir(schema.domain)} in {seconds:.1f}s "
        f"({rows / seconds:,.0f} docs/s{note})"
    )
    return 0


def _build(args: argparse.Namespace, cfg: Config) -> int:
    schema = schema_for(args.domain)
    meta = {
        "source": "generated",
        "generator": schema.domain,
        "generator_version": generator_version(schema.domain),
        "vocab": vocab_fingerprint(),
        "seed": args.seed,
        "size": args.size,
        "created_at": _now(),
    }
    return _write(
        cfg, schema, generate_labeled(schema.domain, args.size, args.seed, args.chunk_rows), meta, args.size
    )


def _load_esci(args: argparse.Namespace, cfg: Config) -> int:
    stats = LoadStats()
    batches = iter_esci(
        args.products, args.reviews, args.meta, locale=args.locale, limit=args.limit, stats=stats
    )
    meta = {
        "source": "esci",
        "loader_version": LOADER_VERSION,
        "products": args.products,
        "reviews": args.reviews,
        "meta": args.meta,
        "locale": args.locale,
        "limit": args.limit,
        "created_at": _now(),
    }
    return _write(cfg, PRODUCTS, batches, meta, args.limit, stats)


def _load_enron(args: argparse.Namespace, cfg: Config) -> int:
    stats = LoadStats()
    batches = iter_enron(args.maildir, limit=args.limit, keep_duplicates=args.keep_duplicates, stats=stats)
    meta = {
        "source": "enron",
        "loader_version": LOADER_VERSION,
        "maildir": args.maildir,
        "limit": args.limit,
        "keep_duplicates": args.keep_duplicates,
        "created_at": _now(),
    }
    return _write(cfg, EMAILS, batches, meta, args.limit, stats)


def _short(value: Any) -> str:
    text = " / ".join(str(value).split("\n"))
    return text if len(text) <= SHOW_WIDTH else text[: SHOW_WIDTH - 3] + "..."


def _show(args: argparse.Namespace, cfg: Config) -> int:
    schema = schema_for(args.domain)
    ws = Workspace(cfg.workspace)
    manifest = corpus_manifest(ws, schema.domain)
    print(f"{schema.domain} corpus in {ws.corpus_dir(schema.domain)}")
    for key in sorted(manifest):
        print(f"  {key}: {manifest[key]}")
    report = read_report(ws.corpus_dir(schema.domain))
    for line in (
        report_lines(report) if report is not None else ["(no load report: written by an older version)"]
    ):
        print(f"  {line}")
    if args.n == 0:
        return 0
    rows: list[dict[str, Any]] = []
    for table in iter_corpus(ws, schema, batch_rows=args.n):
        rows += table.to_pylist()[: args.n - len(rows)]
        if len(rows) >= args.n:
            break
    extras = read_extras(ws, schema.domain, [row["id"] for row in rows])
    more = {e["id"]: e for e in extras.to_pylist()} if extras is not None else {}
    for row in rows:
        print(f"--- {row['id']}")
        for name, value in [*list(row.items())[1:], *list(more.get(row["id"], {}).items())[1:]]:
            print(f"  {name}: {_short(value)}")
    return 0


def register(sub: Any) -> None:
    """Add ``prore corpus build|load|show`` to the ``prore`` parser."""
    corpus = sub.add_parser(
        "corpus",
        help="build, load and inspect corpora",
        description="Build a seeded synthetic corpus, load a real one (ESCI + Amazon Reviews, Enron) "
        "or show the corpus in the workspace. A corpus is replaced only when the new one is complete.",
    )
    actions = corpus.add_subparsers(
        dest="corpus_action", metavar="<action>", required=True, parser_class=_Parser
    )
    domains = f"{{{','.join(DOMAINS)}}}"

    build = actions.add_parser(
        "build",
        help="generate a seeded corpus of any size",
        description="Generate a corpus from the seeded generator: the same seed and size give the same "
        "documents, whatever the chunk size. Prints rows, docs/s and where it wrote.",
        epilog="example: prore corpus build ecommerce --size 100k --seed 0",
    )
    build.add_argument("domain", choices=DOMAINS, metavar=domains, help="which corpus to generate")
    build.add_argument(
        "--size", type=_count, required=True, metavar="N", help="number of documents: 3000, 100k, 1M"
    )
    build.add_argument("--seed", type=_seed, default=0, metavar="S", help="random seed (default 0)")
    build.add_argument(
        "--chunk-rows",
        type=_count,
        default=10_000,
        metavar="R",
        help="rows per parquet part; does not change the documents (default 10000)",
    )
    build.set_defaults(handler=_build)

    load = actions.add_parser(
        "load",
        help="load a real corpus from its source files",
        description="Load a real corpus into the workspace's ecommerce or email corpus. A broken record stops "
        "the load with the file and line, and the previous corpus stays as it was.",
    )
    sources = load.add_subparsers(dest="source", metavar="<source>", required=True, parser_class=_Parser)
    esci = sources.add_parser(
        "esci",
        help="Amazon ESCI products joined with Amazon Reviews 2023 (ecommerce)",
        description="Join the ESCI products parquet with Amazon Reviews 2023 review lines (and item metadata "
        "for prices) into the ecommerce corpus. Products without reviews or a price are dropped and counted.",
        epilog="example: prore corpus load esci --products shopping_queries_dataset_products.parquet "
        "--reviews Electronics.jsonl.gz --meta meta_Electronics.jsonl.gz",
    )
    esci.add_argument(
        "--products", required=True, metavar="P.parquet", help="shopping_queries_dataset_products.parquet"
    )
    esci.add_argument(
        "--reviews", required=True, metavar="R.jsonl", help="review JSON lines (.jsonl or .jsonl.gz)"
    )
    esci.add_argument(
        "--meta", metavar="M.jsonl", help="item metadata JSON lines (meta_*.jsonl); prices come from here"
    )
    esci.add_argument("--locale", default="us", help="ESCI product_locale to keep (default us)")
    esci.add_argument("--limit", type=_count, metavar="N", help="stop after N products")
    esci.set_defaults(handler=_load_esci)
    enron = sources.add_parser(
        "enron",
        help="an Enron-style maildir (email)",
        description="Load maildir/<user>/<folder>/<message> RFC 822 files into the email corpus, one row per "
        "Message-ID: a copy in another folder (the Notes views all_documents, discussion_threads, notes_inbox "
        "repeat inbox and sent) is dropped and counted. Dates are the sender's local time as the Date header "
        "reads; messages with Enron's placeholder date (31 Dec 1979) are dropped and counted.",
        epilog="example: prore corpus load enron --maildir maildir/ --limit 100k",
    )
    enron.add_argument(
        "--maildir",
        required=True,
        metavar="DIR",
        help="the maildir directory itself, one folder per user (the release's maildir/, not the folder above it)",
    )
    enron.add_argument("--limit", type=_count, metavar="N", help="stop after N messages (in load order)")
    enron.add_argument(
        "--keep-duplicates",
        action="store_true",
        help="load every copy of a message (by default one row per Message-ID, the copy in inbox or sent "
        "before the Notes views)",
    )
    enron.set_defaults(handler=_load_enron)

    show = actions.add_parser(
        "show",
        help="print a corpus manifest and sample documents",
        description="Print the manifest of the workspace corpus (source, seed, size, versions), its load report "
        "(records read, loaded, dropped and deduplicated by reason; date and number ranges; the share of empty "
        "values per column; the extra columns kept unindexed) and its first documents.",
    )
    show.add_argument("domain", choices=DOMAINS, metavar=domains, help="which corpus to show")
    show.add_argument("--n", type=_sample_size, default=3, metavar="N", help="documents to print (default 3)")
    show.set_defaults(handler=_show)
