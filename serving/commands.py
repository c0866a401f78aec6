"""CLI subcommands of ``serving``, registered into ``prore`` by :func:`register`.

``prore execute`` runs one retrieval program on the workspace corpus its SQL names::

    echo '{"sql": "SELECT DISTINCT id FROM products WHERE price < 200 AND id IN <text_1>",
           "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}]}' \\
      | prore execute --k 5 --fields title,brand,price

``prore serve`` starts the query API and its playground (:mod:`serving.api.app`) on the workspace's indexes::

    prore serve --port 8080 --planner-url http://127.0.0.1:8000/v1 --planner-card workspace/runs/sft-both/final
    curl -s localhost:8080/v1/search -H 'Content-Type: application/json' \\
      -d '{"query": "wireless headphones under $200", "domain": "ecommerce"}'

Without ``--planner-url`` every search is answered by the BM25+dense RRF fallback (and says so). The model
asked for is ``--planner-model``, else the one the endpoint lists at ``/v1/models``. The prompt
is the one the planner was trained with: ``--planner-card`` reads it from the model directory's
``planner.json``; ``--planner-profile`` names it; with neither, a checkpoint without a card, it is ``full``.
``PRORE_PLANNER_URL``, ``PRORE_PLANNER_MODEL``, ``PRORE_PLANNER_PROFILE``, ``PRORE_PLANNER_OUTPUT`` and
``PRORE_PLANNER_GUIDED_SAMPLES`` give the defaults (the Helm chart's API deployment sets them). A bearer token, when wanted, is read from the environment variable
``--token-env`` names, never from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.config import Config, EmbedderConfig
from indexing.errors import ConfigError
from indexing.schema import PRODUCTS, SCHEMAS, CorpusSchema, schema_for_table
from serving.planner import OUTPUTS
from serving.prompt import PROFILES, planner_profile

if TYPE_CHECKING:
    from serving.dsl.program import Program
    from serving.engine import ExecutionResult
    from serving.planner import PlannerSettings

DEFAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "ecommerce": ("title", "brand", "price"),
    "email": ("subject", "sender", "date"),
}
"""Fields ``prore execute`` prints when ``--fields`` is not given."""

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
    p.add_argument(
        "--domain",
        choices=tuple(SCHEMAS),
        help="the corpus to run on (default: the corpus whose table the program's SQL reads; "
        "validation refuses a program that reads another table)",
    )
    p.add_argument("--k", type=int, default=20, help="how many ranked ids to return (default 20)")
    p.add_argument(
        "--format", choices=("json", "table"), default="table", help="output format (default table)"
    )
    p.add_argument(
        "--fields", metavar="A,B,...", help="fields to print per result (default: a few per corpus)"
    )
    p.set_defaults(handler=execute_command)
    register_serve(sub)


def register_serve(sub: Any) -> None:
    """Add ``prore serve``."""
    from serving.api.settings import API_DEFAULTS as d

    s = sub.add_parser(
        "serve",
        help="serve the query API and the playground (NL -> program -> results, with a fallback)",
        description="Serve POST /v1/search, /v1/plan and /v1/execute, /healthz, /readyz, /metrics, "
        "/openapi.json and the playground at / over the workspace's published indexes.",
    )
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    s.add_argument("--domains", default="ecommerce,email", metavar="A,B", help="corpora to serve (default both)")
    s.add_argument("--planner-url", metavar="URL", default=os.environ.get("PRORE_PLANNER_URL") or None,
                   help="OpenAI-compatible base URL of the planner, up to /v1 (env PRORE_PLANNER_URL)")
    s.add_argument("--planner-model", default=os.environ.get("PRORE_PLANNER_MODEL") or None,
                   help="served model name (env PRORE_PLANNER_MODEL; default: the one model the endpoint lists "
                   "at /v1/models)")  # fmt: skip
    prompt = s.add_mutually_exclusive_group()
    prompt.add_argument("--planner-card", metavar="PATH",
                        help="the planner's model directory (or its planner.json): the prompt profile it was trained with")
    prompt.add_argument("--planner-profile", choices=PROFILES, default=os.environ.get("PRORE_PLANNER_PROFILE") or None,
                        help="prompt profile the planner was trained with (env PRORE_PLANNER_PROFILE; default: "
                        "its --planner-card's, else full, as for a checkpoint without a card)")
    s.add_argument("--planner-output", choices=OUTPUTS, default=os.environ.get("PRORE_PLANNER_OUTPUT") or "grounded",
                   help="how the planner's decoding is constrained through vLLM's structured_outputs, as evaluation's "
                   "planner-grounded:, planner-grammar: and planner-json: constrain it: grounded (the default: the "
                   "program grammar whose search phrases are spans of the request and whose string literals are the "
                   "corpus's values), grammar (the program grammar: typed SQL, placeholders matched to entries), both "
                   "for a vLLM server on its guidance backend; json (the DSL's JSON schema with the programs' "
                   "separators, for a server on xgrammar, vLLM's default); or free (env PRORE_PLANNER_OUTPUT)")  # fmt: skip
    s.add_argument("--planner-timeout-s", type=float, default=d.plan_deadline_s, help="planning deadline per request")
    s.add_argument("--guided-samples", type=_samples, default=_samples(os.environ.get("PRORE_PLANNER_GUIDED_SAMPLES") or "0"),
                   metavar="N", help="execution-guided decoding: when the planner's program fails, ask for N sampled "
                   "programs in one call and answer with the ranking most of them agree on, before the fallback "
                   "(env PRORE_PLANNER_GUIDED_SAMPLES; default 0, off)")  # fmt: skip
    s.add_argument("--planner-key-env", metavar="VAR", help="environment variable holding the planner's API key")
    s.add_argument("--token-env", metavar="VAR", help="environment variable holding the bearer token /v1/* requires")
    s.add_argument("--max-concurrent", type=int, default=d.max_concurrent, help="requests in flight before 429")
    s.add_argument("--max-nl-chars", type=int, default=d.max_nl_chars, help="longest request accepted")
    s.add_argument("--execute-timeout-s", type=float, default=d.execute_deadline_s, help="engine deadline per request")
    s.add_argument("--fallback-on-empty", action=argparse.BooleanOptionalAction, default=d.fallback_on_empty,
                   help="answer a planner program that matches no document with the fallback (default: on)")
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    s.set_defaults(handler=serve_command)


MAX_GUIDED_SAMPLES = 16
"""Most samples one search may ask the planner for (each is decoded and executed)."""


def _samples(text: str) -> int:
    """``--guided-samples``: an integer from 0 to :data:`MAX_GUIDED_SAMPLES`."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= MAX_GUIDED_SAMPLES:
        raise argparse.ArgumentTypeError(f"guided samples must be an integer from 0 to {MAX_GUIDED_SAMPLES}, got {text!r}")
    return n


def _env(name: str | None, what: str) -> str | None:
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{what}: environment variable {name} is not set", code="missing_env")
    return value


def planner_from_args(args: argparse.Namespace, embedder: EmbedderConfig | None = None) -> PlannerSettings | None:
    """``prore serve``'s planner client: None without ``--planner-url``; the prompt profile from
    ``--planner-card`` (which wins over ``PRORE_PLANNER_PROFILE``), ``--planner-profile`` or ``full``, and
    the card's exemplars, embedded with ``embedder``."""
    from serving.planner import PlannerSettings

    if not args.planner_url:
        return None
    return PlannerSettings(
        url=args.planner_url, model=args.planner_model,
        profile=planner_profile(None if args.planner_card else args.planner_profile, args.planner_card),
        api_key=_env(args.planner_key_env, "--planner-key-env"), timeout_s=args.planner_timeout_s,
        guided_samples=args.guided_samples, output=args.planner_output, card=args.planner_card,
        embedder=embedder,
    )  # fmt: skip


def serve_command(args: argparse.Namespace, cfg: Config) -> int:
    """``prore serve``: open each corpus's engine, then run the API under uvicorn until interrupted."""
    from indexing.errors import require

    require("fastapi", "serve")
    require("uvicorn", "serve")
    import logging

    import uvicorn

    from serving.api.app import create_app
    from serving.api.settings import ApiSettings
    from serving.engine import Engine

    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    for domain in domains:
        if domain not in SCHEMAS:
            raise ConfigError(f"unknown domain {domain!r}; choose from {', '.join(SCHEMAS)}", code="unknown_domain")
    if args.max_concurrent < 1 or args.max_nl_chars < 1:
        raise ConfigError("--max-concurrent and --max-nl-chars must be at least 1", code="bad_limit")
    planner = planner_from_args(args, cfg.embedder)
    if planner is not None:
        from serving.planner import prepare

        prepare(planner, domains)  # a missing xgrammar fails here, and each grammar is compiled once
    settings = ApiSettings(
        max_concurrent=args.max_concurrent, max_nl_chars=args.max_nl_chars, plan_deadline_s=args.planner_timeout_s,
        execute_deadline_s=args.execute_timeout_s, fallback_on_empty=args.fallback_on_empty, token=_env(args.token_env, "--token-env"),
    )  # fmt: skip
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(message)s")
    engines = {d: Engine.open(cfg, d) for d in domains}
    try:
        app = create_app(engines, planner, settings)
        where = f"http://{args.host}:{args.port}"
        print(f"query API and playground on {where}/ ({', '.join(domains)}; planner: "
              f"{args.planner_url or 'none, the fallback answers'})", flush=True)  # fmt: skip
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        for engine in engines.values():
            engine.close()
    return 0


def schema_of(program: Program) -> CorpusSchema:
    """The corpus a program runs on when no domain is named: the corpus whose table its SQL reads first.

    The table comes from the SQL's syntax tree (sqlglot), never from a pattern over its text. This only
    picks which corpus to open; validation then checks every table against that corpus and rejects
    anything else with its code. SQL that does not parse opens the default corpus and fails validation
    there with its own error.
    """
    import sqlglot
    from sqlglot import exp

    from serving.dsl.placeholders import mark_placeholders

    try:
        marked, _ = mark_placeholders(program.sql)
        tree = sqlglot.parse_one(marked, dialect="clickhouse")
    except Exception:
        return PRODUCTS
    table = tree.find(exp.Table) if tree is not None else None
    name = table.name.lower() if table is not None else ""
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
    schema = SCHEMAS[args.domain] if args.domain else schema_of(program)
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
