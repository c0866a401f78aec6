"""The project's KServe transformer: its model under KServe's ModelServer, in front of the planner's predictor.

In the cluster one InferenceService is the whole endpoint: the predictor is KServe's Hugging Face runtime
serving the planner with vLLM (OpenAI routes under ``/openai/v1``), and the project's model, as the
transformer, turns NL into a program into results, reaching the predictor through ``predictor_host``.

The model (:class:`serving.kserve_model.ProRetrievalModel`), named by ``--model_name`` (``proretrieval`` by
default; in the cluster KServe passes the InferenceService's name), answers KServe's v1 route
``POST /v1/models/<name>:predict`` with ``{"instances": [{"query": ..., "domain": ..., "k": ...}]}``;
each prediction is the query API's search answer (program, candidates, results, timings, fallback). It
calls the predictor's OpenAI-style route (``/openai/v1/chat/completions``) through
:class:`serving.planner.Planner`.

Where ``vllm`` is installed, ``python -m serving.kserve`` serves
:class:`serving.kserve_openai.ProRetrievalChatModel` instead: the same model, under the same name, also on
KServe's own OpenAI-style routes
(``GET /openai/v1/models``, ``POST /openai/v1/chat/completions``: the last user message in, the planner's
validated program out). KServe 0.20's OpenAI types import vLLM module paths that vLLM 0.32 moved;
:mod:`serving.kserve_compat` aliases them. Without ``vllm`` it serves the v1 route only, and says so.

Run it (``pip install '.[kserve]'``; ``'.[kserve,train]'`` for the OpenAI route)::

    python -m serving.kserve --workspace DIR --predictor_host planner-predictor.ns --http_port 8080

Without ``--clickhouse_url`` / ``--milvus_uri`` the engines open the workspace's embedded stores; chDB allows
one process per path, so in a cluster whose services share the workspace give it the stores' servers.

Its arguments are KServe's ModelServer's (:func:`arg_parser`) plus the project's, so the arguments KServe's
controller appends to a transformer container need no wrapper.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence

from core.flags import Flag, Flags
from core.settings import Section
from indexing.config import Config
from serving.engine import Engine
from serving.planner import OUTPUTS, PlannerSettings, prepare
from serving.settings import FUSE_GATES, FUSE_PARTNERS, SECTION, ApiSettings, ServingSettings


def kserve_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as KServe may see it: without ``--config FILE`` (or ``--config=FILE``). KServe's ``model_server``
    parses ``sys.argv`` when it is imported (``parse_known_args``, which allows abbreviations), and would read
    this module's ``--config`` as its own ``--configure_logging`` and exit.

    >>> kserve_argv(["m", "--config", "c.yaml", "--http_port", "8080", "--config=d.yaml"])
    ['m', '--http_port', '8080']
    """
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--config":
            skip = True
        elif not arg.startswith("--config="):
            out.append(arg)
    return out


_ARGV, sys.argv = sys.argv, kserve_argv(sys.argv)
try:
    import kserve  # type: ignore[import-untyped]

    from serving.kserve_model import ProRetrievalModel
finally:
    sys.argv = _ARGV


MODEL_NAME = "proretrieval"
"""The model's name where ``--model_name`` is not given (KServe gives the InferenceService's name)."""


def arg_parser() -> argparse.ArgumentParser:
    """``python -m serving.kserve``'s arguments: the project's own over KServe's ModelServer parser.

    KServe's parser (``kserve.model_server.parser``) is the parent, so every argument KServe 0.20's controller
    appends to a transformer container is one this parser knows: ``--model_name`` (the InferenceService's
    name), ``--predictor_host`` (``<name>-predictor.<namespace>``), ``--http_port 8080``, ``--workers`` (only
    with ``containerConcurrency``) and, in ModelMesh mode, ``--protocol``. Anything else is an error.
    ``--predictor_use_ssl`` and ``--predictor_request_timeout_seconds`` configure the planner client; the
    predictor is called on its OpenAI route (``--predictor_path``) whatever ``--predictor_protocol`` says.
    The project's own follow the parent's underscore style; ``--workspace``, ``--config``, ``--clickhouse_url``
    and ``--milvus_uri`` are prore's global options of those names, read by :func:`config` as prore reads them.
    """
    p = argparse.ArgumentParser(prog="python -m serving.kserve", allow_abbrev=False,
                                description="The ProRetrieval transformer under KServe's ModelServer",
                                parents=[kserve.model_server.parser])  # fmt: skip
    p.add_argument("--workspace", required=True)
    p.add_argument("--config", help="config file (YAML), as prore's --config")
    p.add_argument(
        "--clickhouse_url",
        metavar="URL",
        help="ClickHouse server URL, as prore's --clickhouse-url (default: embedded chDB in the workspace)",
    )
    p.add_argument(
        "--milvus_uri",
        metavar="URI",
        help="Milvus server URI, as prore's --milvus-uri (default: embedded Milvus Lite in the workspace)",
    )
    p.add_argument(
        "--predictor_path",
        default="/openai/v1",
        help="OpenAI base path on the predictor (KServe's Hugging Face runtime: /openai/v1; vLLM: /v1)",
    )
    p.add_argument("--domains", default="ecommerce,email")
    SERVING_FLAGS.add_to(p)
    return p


DEFAULTS = {"serving.planner.output": "json"}
"""The transformer's defaults where they differ from ``prore serve``'s: its predictor is KServe's Hugging Face
runtime, vLLM on its default xgrammar backend, which takes the DSL's JSON schema (``grounded`` needs vLLM's
guidance backend). The config file, ``PRORE_PLANNER_OUTPUT`` and ``--planner_output`` set it again."""

SERVING_FLAGS: Flags[ServingSettings] = Flags(
    Section(SECTION, ServingSettings),
    Flag("planner.model", "--planner_model", help="The model name the predictor serves (its own --model_name); "
         "unset: the one model the predictor lists."),
    Flag("planner.output", "--planner_output", choices=OUTPUTS, default=DEFAULTS["serving.planner.output"]),
    Flag("planner.profile", "--planner_profile"),
    Flag("planner.card", "--planner_card", metavar="PATH"),
    Flag("planner.guided_samples", "--guided_samples", metavar="N"),
    Flag("api.fuse", "--fuse", choices=FUSE_PARTNERS),
    Flag("api.fuse_gate", "--fuse_gate", choices=FUSE_GATES),
    exclusive=[("planner.card", "planner.profile")],
)  # fmt: skip
"""The transformer's serving flags (the planner and fusion): fields of the config's ``serving.planner`` and
``serving.api``, as ``prore serve``'s ``--planner-*``, ``--guided-samples``, ``--fuse`` and ``--fuse-gate`` flags
are, in the underscore style of KServe's parser they join. The planner's URL and timeout come from KServe's own
``--predictor_*`` arguments."""


def planner_settings(args: argparse.Namespace, cfg: Config) -> PlannerSettings:
    """The planner client of :func:`parse_args`'s arguments: the config's ``serving.planner`` section (defaults <
    file < ``PRORE_PLANNER_*``) with the ``--planner_*`` flags given laid over it, as ``prore serve`` reads it;
    it calls the predictor at ``--predictor_host`` on ``--predictor_path`` (KServe's Hugging Face runtime:
    ``/openai/v1``; a bare vLLM server: ``/v1``) within ``--predictor_request_timeout_seconds``, prompts with its
    card's profile when it has one (:mod:`serving.exemplars`) and embeds exemplars as ``cfg`` says."""
    planner = SERVING_FLAGS.over(cfg.section(ServingSettings), args).planner
    scheme = "https" if args.predictor_use_ssl else "http"
    planner = dataclasses.replace(planner, url=f"{scheme}://{args.predictor_host}{args.predictor_path}",
                                  timeout_s=float(args.predictor_request_timeout_seconds),
                                  embedder=planner.embedder or cfg.embedder)  # fmt: skip
    return planner.with_card_profile(profile_given="planner.profile" in SERVING_FLAGS.given(args))


def api_settings(args: argparse.Namespace, cfg: Config) -> ApiSettings:
    """The search service's settings: the config's ``serving.api`` (its limits, deadlines and fusion with the
    self-querying retriever, ``fuse`` and ``fuse_gate``) with ``--fuse`` and ``--fuse_gate`` laid over it, without
    the start-up warm-up (the model loads its engines in ``load``)."""
    return dataclasses.replace(SERVING_FLAGS.over(cfg.section(ServingSettings), args).api, warmup=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, with this model's defaults where KServe's differ (model name, planner timeout, no gRPC).

    An unknown argument, a missing ``--predictor_host`` or more than one worker is a usage error (exit 2)."""
    p = arg_parser()
    defaults = argparse.Namespace(
        model_name=MODEL_NAME, enable_grpc=False, predictor_request_timeout_seconds=10
    )
    args = p.parse_args(argv, namespace=defaults)
    if not args.predictor_host:
        p.error("--predictor_host is required (host[:port] of the planner predictor; KServe passes it)")
    if args.workers != 1:
        p.error(f"--workers is {args.workers}; the model runs one process per pod (scale with replicas)")
    return args


def config(args: argparse.Namespace) -> Config:
    """The config the engines open, from :func:`parse_args`'s arguments: :func:`indexing.config.load_config`
    with the flags prore passes it (defaults, the transformer's :data:`DEFAULTS` over the classes' < ``--config``
    < the environment < ``--workspace`` and the store URLs). Without a store URL the store is the embedded one in the workspace (chDB, Milvus Lite).

    This process runs the indexing and serving layers, so it registers the ``serving`` section and reads the
    file ``partial``: the keys of the layers above (``rl``) are accepted unread, as ``prore`` reads the same
    file whole."""
    from indexing.config import load_config
    from serving.settings import SECTIONS

    return load_config(args.config, sections=SECTIONS, partial=True, workspace=args.workspace,
                       clickhouse_url=args.clickhouse_url, milvus_uri=args.milvus_uri, defaults=DEFAULTS)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = config(args)
    engines = {d: Engine.open(cfg, d) for d in args.domains.split(",") if d}
    planner = planner_settings(args, cfg)
    prepare(planner, engines)  # a missing xgrammar fails here, and each grammar is compiled once
    model_class = ProRetrievalModel
    try:
        from serving.kserve_openai import ProRetrievalChatModel

        model_class = ProRetrievalChatModel
    except ImportError as exc:  # KServe's OpenAI types are vLLM's
        logging.getLogger(__name__).warning(
            "KServe's OpenAI route is off (%s; pip install '.[train]' for vllm); serving the v1 route only",
            exc,
        )
    model = model_class(args.model_name, engines, planner, api_settings(args, cfg))
    model.load()
    kserve.ModelServer(
        http_port=args.http_port, grpc_port=args.grpc_port, enable_grpc=args.enable_grpc
    ).start([model])


if __name__ == "__main__":
    main()
