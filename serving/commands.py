"""CLI subcommands of ``serving``, registered into ``prore`` by :func:`register`.

``prore execute`` runs one retrieval program on the workspace corpus its SQL names::

    echo '{"sql": "SELECT DISTINCT id FROM products WHERE price < 200 AND id IN <text_1>",
           "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}]}' \\
      | prore execute --k 5 --fields title,brand,price

``prore serve`` starts the query API and its playground (:mod:`serving.api.app`) on the workspace's indexes::

    prore serve --port 8080 --planner-url http://127.0.0.1:8000/v1 --planner-card workspace/runs/sft-both/final
    curl -s localhost:8080/v1/search -H 'Content-Type: application/json' \\
      -d '{"query": "wireless headphones under $200", "domain": "ecommerce"}'

Without a planner URL every search is answered by the BM25+dense RRF fallback (and says so). The model
asked for is ``--planner-model``, else the one the endpoint lists at ``/v1/models``. The prompt
is the one the planner was trained with: ``--planner-card`` reads it from the model directory's
``planner.json``; ``--planner-profile`` names it; with neither, a checkpoint without a card, it is ``full``.

Its settings are the config file's ``serving.api`` (:class:`~serving.settings.ApiSettings`) and
``serving.planner`` (:class:`~serving.planner.PlannerSettings`) sections, with ``PRORE_PLANNER_URL``,
``PRORE_PLANNER_MODEL``, ``PRORE_PLANNER_PROFILE``, ``PRORE_PLANNER_OUTPUT`` and ``PRORE_PLANNER_GUIDED_SAMPLES``
over the file (the Helm chart's API deployment sets them; :func:`indexing.config.load_config` reads them) and
:data:`SERVE_FLAGS` over both. A bearer token, when wanted, is read from the environment variable
``--token-env`` names, never from the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ConfigError
from core.flags import Flag, Flags
from core.settings import Section
from indexing.config import Config
from indexing.schema import PRODUCTS, SCHEMAS, CorpusSchema, schema_for_table
from serving.planner import OUTPUTS, PlannerSettings
from serving.settings import FUSE_GATES, FUSE_PARTNERS, SECTION, ServingSettings

if TYPE_CHECKING:
    from serving.dsl.program import Program
    from serving.engine import ExecutionResult
    from serving.settings import ApiSettings

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
        "--program",
        action="append",
        metavar="FILE|-",
        help="program JSON file, or - for stdin (default); repeat it to run several programs in one process "
        "(each corpus's index opened once), printed in turn after all have run",
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


SERVE_FLAGS: Flags[ServingSettings] = Flags(
    Section(SECTION, ServingSettings),
    Flag("planner.url", "--planner-url", metavar="URL"),
    Flag("planner.model", "--planner-model"),
    Flag("planner.card", "--planner-card", metavar="PATH"),
    Flag("planner.profile", "--planner-profile"),
    Flag("planner.output", "--planner-output", choices=OUTPUTS),
    Flag(
        "planner.timeout_s",
        "--planner-timeout-s",
        also=("api.plan_deadline_s",),
        help="Planning deadline per request: how long one call to the planner, and the API's planning stage, "
        "may take.",
    ),
    Flag("planner.guided_samples", "--guided-samples", metavar="N"),
    "api.max_concurrent",
    "api.max_nl_chars",
    Flag("api.execute_deadline_s", "--execute-timeout-s"),
    "api.fallback_on_empty",
    Flag("api.fuse", "--fuse", choices=FUSE_PARTNERS),
    Flag("api.fuse_gate", "--fuse-gate", choices=FUSE_GATES),
    exclusive=[("planner.card", "planner.profile")],
)
"""The flags of ``prore serve`` that set the ``serving`` section's ``planner`` and ``api``."""


def register_serve(sub: Any) -> None:
    """Add ``prore serve``."""
    s = sub.add_parser(
        "serve",
        help="serve the query API and the playground (NL -> program -> results, with a fallback)",
        description="Serve POST /v1/search, /v1/plan and /v1/execute, /healthz, /readyz, /metrics, "
        "/openapi.json and the playground at / over the workspace's published indexes. The planner and API "
        "settings below are keys of the config file's serving.planner and serving.api sections; the "
        "environment's PRORE_PLANNER_* go over the file, a flag given over both.",
    )
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    s.add_argument(
        "--domains", default="ecommerce,email", metavar="A,B", help="corpora to serve (default both)"
    )
    SERVE_FLAGS.add_to(s)
    s.add_argument(
        "--planner-key-env", metavar="VAR", help="environment variable holding the planner's API key"
    )
    s.add_argument(
        "--token-env", metavar="VAR", help="environment variable holding the bearer token /v1/* requires"
    )
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    s.set_defaults(handler=serve_command)


def _env(name: str | None, what: str) -> str | None:
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{what}: environment variable {name} is not set", code="missing_env")
    return value


def serve_settings(args: argparse.Namespace, cfg: Config) -> ServingSettings:
    """``prore serve``'s settings: the config's ``serving`` section (the file, then the environment) with the
    flags given laid over it."""
    return SERVE_FLAGS.over(cfg.section(ServingSettings), args)


def planner_from_args(args: argparse.Namespace, cfg: Config) -> PlannerSettings | None:
    """``prore serve``'s planner client: None without a planner URL; the prompt profile from the planner's card
    when it has one (which wins over a profile the file or ``PRORE_PLANNER_PROFILE`` gives; with
    ``--planner-profile`` too it is an error), else ``profile``; exemplars embedded as ``cfg`` says."""
    planner = serve_settings(args, cfg).planner
    if not planner.url:
        return None
    planner = planner.with_card_profile(profile_given="planner.profile" in SERVE_FLAGS.given(args))
    key = _env(args.planner_key_env, "--planner-key-env")
    return dataclasses.replace(
        planner, api_key=key or planner.api_key, embedder=planner.embedder or cfg.embedder
    )


def api_settings(args: argparse.Namespace, cfg: Config) -> ApiSettings:
    """``prore serve``'s API limits and deadlines, its bearer token read from ``--token-env``'s variable."""
    api = serve_settings(args, cfg).api
    return dataclasses.replace(api, token=_env(args.token_env, "--token-env") or api.token)


def serve_command(args: argparse.Namespace, cfg: Config) -> int:
    """``prore serve``: open each corpus's engine, then run the API under uvicorn until interrupted."""
    from core.errors import require

    require("fastapi", "serve")
    require("uvicorn", "serve")
    import logging

    import uvicorn

    from core.logs import timed
    from serving.api.app import create_app
    from serving.api.service import START_LOG
    from serving.engine import Engine

    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    for domain in domains:
        if domain not in SCHEMAS:
            raise ConfigError(
                f"unknown domain {domain!r}; choose from {', '.join(SCHEMAS)}", code="unknown_domain"
            )
    settings = api_settings(args, cfg)
    planner = planner_from_args(args, cfg)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(message)s")
    if planner is not None:
        from serving.planner import prepare

        with timed(START_LOG, f"start: the planner's prompt and grammars ({planner.output})"):
            prepare(planner, domains)  # a missing xgrammar fails here, and each grammar is compiled once
    engines = {}
    for d in domains:
        with timed(START_LOG, f"start: {d}'s engine opened"):
            engines[d] = Engine.open(cfg, d)
    try:
        app = create_app(engines, planner, settings)
        where = f"http://{args.host}:{args.port}"
        print(f"query API and playground on {where}/ ({', '.join(domains)}; planner: "
              f"{planner.url if planner else 'none, the fallback answers'})", flush=True)  # fmt: skip
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
    """``prore execute``: parse every program, open each corpus's index once, execute, then print (a program
    that fails leaves nothing printed)."""
    # Imported here so that ``prore --help`` and other commands do not load the engine.
    from serving.dsl import parse_program
    from serving.engine import Engine

    if args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}", code="bad_k")
    sources: list[str] = args.program or ["-"]
    programs = [parse_program(_read_program(source)) for source in sources]
    schemas = [SCHEMAS[args.domain] if args.domain else schema_of(program) for program in programs]
    fields = [_fields(schema, args.fields) for schema in schemas]
    engines: dict[str, Engine] = {}
    outputs: list[tuple[dict[str, Any], str]] = []
    try:
        for program, schema, names in zip(programs, schemas, fields, strict=True):
            engine = engines.get(schema.domain)
            if engine is None:
                engine = engines[schema.domain] = Engine.open(cfg, schema.domain)
            # Load the embedding models before timing, so the printed timings are those of a warm
            # service, not of this process's one-off model load.
            for field in {entry.field for entry in program.retrieval_list if entry.mode != "sparse"}:
                engine.handle.embedder(field).embed(["warm-up"])
            result = engine.execute(program, k=args.k)
            wanted = [f for f in names if f != "id"]
            docs = (
                engine.handle.fetch_docs(list(result.ids), ["id", *wanted]) if result.ids and wanted else []
            )
            by_id = {str(d["id"]): d for d in docs}
            rows = [
                {"id": doc, "score": score, **{f: by_id.get(doc, {}).get(f) for f in wanted}}
                for doc, score in zip(result.ids, result.scores, strict=True)
            ]
            outputs.append(({**result.to_dict(), "domain": schema.domain, "results": rows},
                            render_table(result, rows, wanted)))  # fmt: skip
    finally:
        for engine in engines.values():
            engine.close()
    if args.format == "json":
        payloads = [payload for payload, _ in outputs]
        if len(sources) > 1:  # one JSON document: the programs' results in order, each naming its file
            payloads = [{"program_file": source, **p} for source, p in zip(sources, payloads, strict=True)]
        print(
            json.dumps(
                payloads[0] if len(sources) == 1 else payloads, indent=2, default=str, ensure_ascii=False
            )
        )
    else:
        for source, (_, table) in zip(sources, outputs, strict=True):
            if len(sources) > 1:
                print(f"--- {source}")
            print(table)
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
