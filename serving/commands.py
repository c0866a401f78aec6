"""CLI subcommands of ``serving``, registered into ``prore`` by :func:`register`.

``prore execute`` runs one retrieval program on the workspace corpus its SQL names::

    echo '{"sql": "SELECT DISTINCT id FROM products WHERE price < 200 AND id IN <text_1>",
           "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}]}' \\
      | prore execute --k 5 --fields title,brand,price
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.config import Config
from indexing.errors import ConfigError
from indexing.schema import PRODUCTS, SCHEMAS, CorpusSchema, schema_for_table

if TYPE_CHECKING:
    from serving.dsl.program import Program
    from serving.engine import ExecutionResult

DEFAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "ecommerce": ("title", "brand", "price"),
    "email": ("subject", "sender", "date"),
}
"""Fields ``prore execute`` prints when ``--fields`` is not given."""

_FROM = re.compile(r"\bFROM\s+`?\"?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def register(sub: Any) -> None:
    """Add this layer's subcommands to the ``prore`` parser."""
    p = sub.add_parser(
        "execute",
        help="run a retrieval program on the workspace corpus and print the ranked ids",
        description="Run one retrieval program (JSON, DESIGN.md section 3) on the workspace corpus named "
        "by the table in its SQL (products -> ecommerce, emails -> email) and print the ranked results.",
    )
    p.add_argument(
        "--program", default="-", metavar="FILE|-", help="program JSON file, or - for stdin (default)"
    )
    p.add_argument("--k", type=int, default=20, help="how many ranked ids to return (default 20)")
    p.add_argument(
        "--format", choices=("json", "table"), default="table", help="output format (default table)"
    )
    p.add_argument(
        "--fields", metavar="A,B,...", help="fields to print per result (default: a few per corpus)"
    )
    p.set_defaults(handler=execute_command)


def schema_of(program: Program) -> CorpusSchema:
    """The corpus a program runs on: the first table its SQL reads from.

    Validation checks the whole SQL against this schema afterwards; this only picks which corpus to open,
    and a name that is no corpus table falls through to validation, which rejects it with its code.
    """
    match = _FROM.search(program.sql)
    if match is not None:
        name = match.group(1).lower()
        for schema in SCHEMAS.values():
            if schema.table == name:
                return schema_for_table(name)
    return PRODUCTS


def _read_program(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"program file not found: {path}", code="no_program")
    return path.read_text()


def _fields(schema: CorpusSchema, spec: str | None) -> tuple[str, ...]:
    if spec is None:
        return DEFAULT_FIELDS.get(schema.domain, ())
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    for name in names:
        schema.field(name)  # raises unknown_field with the corpus named
    return names


def execute_command(args: argparse.Namespace, cfg: Config) -> int:
    """``prore execute``: parse, open the corpus's index, execute, print."""
    # Imported here so that ``prore --help`` and other commands do not load the engine.
    from serving.dsl import parse_program
    from serving.engine import Engine

    if args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}", code="bad_k")
    program = parse_program(_read_program(args.program))
    schema = schema_of(program)
    fields = _fields(schema, args.fields)
    engine = Engine.open(cfg, schema.domain)
    try:
        # Load the embedding models before timing, so the printed timings are those of a warm
        # service, not of this process's one-off model load.
        for field in {entry.field for entry in program.retrieval_list if entry.mode != "sparse"}:
            engine.handle.embedder(field).embed(["warm-up"])
        result = engine.execute(program, k=args.k)
        wanted = [f for f in fields if f != "id"]
        docs = engine.handle.fetch_docs(list(result.ids), ["id", *wanted]) if result.ids and wanted else []
    finally:
        engine.close()
    by_id = {str(d["id"]): d for d in docs}
    rows = [
        {"id": doc, "score": score, **{f: by_id.get(doc, {}).get(f) for f in wanted}}
        for doc, score in zip(result.ids, result.scores, strict=True)
    ]
    if args.format == "json":
        payload = {**result.to_dict(), "domain": schema.domain, "results": rows}
        print(json.dumps(payload, indent=2, default=str, ensure_ascii=False))
    else:
        print(render_table(result, rows, wanted))
    return 0


def render_table(result: ExecutionResult, rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> str:
    """Ranked results as an aligned text table, followed by the candidate sizes and timings."""
    header = ["rank", "id", "score", *fields]
    body = [
        [str(i), str(r["id"]), f"{r['score']:.5f}", *(_cell(r[f]) for f in fields)]
        for i, r in enumerate(rows, 1)
    ]
    widths = [max(len(h), *(len(line[c]) for line in body)) if body else len(h) for c, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in body]
    if not body:
        lines.append("(no results)")
    cands = ", ".join(f"{name}: {len(ids)}" for name, ids in result.candidates.items())
    timing = ", ".join(f"{stage} {ms:.1f}" for stage, ms in result.timings.items())
    lines.append(f"candidates: {cands or 'none'}")
    lines.append(f"timings (ms): {timing}")
    return "\n".join(lines)


def _cell(value: Any, width: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."
