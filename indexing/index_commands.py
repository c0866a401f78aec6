"""``prore index build`` and ``prore index info``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from core.errors import ConfigError
from indexing.config import Config
from indexing.errors import CorpusError
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace


def register(sub: Any) -> None:
    """Add ``prore index ...`` to the ``prore`` parser."""
    from indexing.build import DEFAULT_BATCH_ROWS, ENGINES

    index = sub.add_parser("index", help="build and inspect the versioned indexes of a corpus")
    isub = index.add_subparsers(dest="index_command", metavar="<index command>", required=True)

    build = isub.add_parser(
        "build",
        help="load the workspace corpus into ClickHouse, Milvus and BM25 and publish a new version",
        description="Build the index of DOMAIN from the workspace corpus. Idempotent (an up-to-date index is "
        "left alone), resumable after a crash, and published atomically.",
    )
    build.add_argument("domain", help=f"corpus domain: {' or '.join(DOMAINS)}")
    build.add_argument("--index-type", metavar="TYPE", help="Milvus index type (default from config: FLAT)")
    build.add_argument(
        "--batch-rows",
        metavar="N",
        default=str(DEFAULT_BATCH_ROWS),
        help=f"rows per chunk (default {DEFAULT_BATCH_ROWS})",
    )
    build.add_argument(
        "--engine",
        choices=ENGINES,
        help="local: embed in this process; ray: Ray Data with an actor pool "
        "(default from config: local; the index is the same either way)",
    )
    build.add_argument(
        "--actors", metavar="N", help="embedding actors of the ray engine (default from config: 2)"
    )
    build.add_argument("--no-progress", action="store_true", help="no progress bars")
    build.set_defaults(handler=cmd_build)

    info = isub.add_parser("info", help="show the versions and store counts of the indexes")
    info.add_argument("domain", nargs="?", help="one domain (default: all)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(handler=cmd_info)


def cmd_build(args: argparse.Namespace, cfg: Config) -> int:
    """Handler of ``prore index build``."""
    from indexing.build import build_index

    schema_for(args.domain)
    try:
        batch_rows = int(args.batch_rows)
    except ValueError:
        raise ConfigError(f"--batch-rows must be a whole number, got {args.batch_rows!r}") from None
    if args.index_type:
        cfg = cfg.replace(milvus=dataclasses.replace(cfg.milvus, index_type=args.index_type))
    if args.engine:
        cfg = cfg.replace(build=dataclasses.replace(cfg.build, engine=args.engine))
    if args.actors is not None:
        try:
            actors = int(args.actors)
        except ValueError:
            raise ConfigError(f"--actors must be a whole number, got {args.actors!r}") from None
        cfg = cfg.replace(build=dataclasses.replace(cfg.build, ray_actors=actors))
    result = build_index(
        cfg, args.domain, batch_rows=batch_rows, progress=False if args.no_progress else None
    )
    print(result.summary())
    return 0


def cmd_info(args: argparse.Namespace, cfg: Config) -> int:
    """Handler of ``prore index info``."""
    domains = [schema_for(args.domain).domain] if args.domain else list(DOMAINS)
    infos = [index_status(cfg, d) for d in domains]
    if args.json:
        print(json.dumps(infos, indent=2, sort_keys=True, default=str))
    else:
        print("\n\n".join(format_status(i) for i in infos))
    return 0


def index_status(cfg: Config, domain: str) -> dict[str, Any]:
    """Versions and per-store counts of ``domain``'s index; opens the stores only if a version exists."""
    from indexing.build import JOURNAL, list_versions, store_counts
    from indexing.corpora.files import corpus_manifest
    from indexing.index import read_current, read_version

    schema = schema_for(domain)
    ws = Workspace(cfg.workspace)
    out: dict[str, Any] = {"domain": domain, "workspace": str(ws.root)}
    try:
        manifest = corpus_manifest(ws, domain)
        out["corpus_rows"] = manifest.get("rows")
        out["corpus_fingerprint"] = manifest.get("fingerprint")
    except CorpusError:
        out["corpus_rows"] = None
    current = read_current(ws, domain)
    out["current"] = current
    versions = []
    for v in list_versions(ws, domain):
        journal_path = ws.index_dir(domain, v) / JOURNAL
        journal = json.loads(journal_path.read_text()) if journal_path.is_file() else {}
        state = "complete" if read_version(ws, domain, v) else str(journal.get("state", "unknown"))
        versions.append(
            {"version": v, "state": state, "chunks": journal.get("chunks"), "rows": journal.get("rows")}
        )
    out["versions"] = versions
    if current:
        from indexing.stores.clickhouse import make_sql_store
        from indexing.stores.milvus import make_vector_store

        meta = read_version(ws, domain, current) or {}
        counts = store_counts(cfg, ws, schema, current, make_sql_store(cfg), make_vector_store(cfg))
        out.update(
            rows=meta.get("rows"),
            table=meta.get("table"),
            collection=meta.get("collection"),
            clickhouse_rows=counts["clickhouse"],
            milvus_entities=counts["milvus"],
            bm25_docs={k.removeprefix("bm25."): v for k, v in counts.items() if k.startswith("bm25.")},
            embedders=(meta.get("settings") or {}).get("embedders"),
            published_at=meta.get("published_at"),
        )
    return out


def format_status(info: dict[str, Any]) -> str:
    """The text form of :func:`index_status`."""
    domain = info["domain"]
    corpus = (
        "none (run: prore corpus build " + domain + ")"
        if info["corpus_rows"] is None
        else str(info["corpus_rows"])
    )
    lines = [f"{domain}", f"  corpus rows      {corpus}"]
    if not info["current"]:
        lines.append(f"  current version  none (run: prore index build {domain})")
    else:
        embedders = ", ".join(
            f"{role}={e['name']} ({e['dim']}d)" for role, e in (info.get("embedders") or {}).items()
        )
        bm25 = ", ".join(f"{f}={n}" for f, n in info["bm25_docs"].items())
        lines += [
            f"  current version  {info['current']} (published {info.get('published_at')})",
            f"  clickhouse rows  {info['clickhouse_rows']}  [{info['table']}]",
            f"  milvus entities  {info['milvus_entities']}  [{info['collection']}]",
            f"  bm25 docs        {bm25}",
            f"  embedder         {embedders}",
        ]
    others = [f"{v['version']} ({v['state']})" for v in info["versions"] if v["version"] != info["current"]]
    lines.append(f"  other versions   {', '.join(others) if others else 'none'}")
    return "\n".join(lines)
