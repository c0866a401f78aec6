"""``prore reward serve``: the shared reward service.

prore reward serve [--domain ecommerce --domain email] [--host 0.0.0.0] [--port 8300]
                   [--accuracy hit1|satisfy|mrr] [--window-ms 5] [--tokenizer DIR] ...

Its settings are the config file's ``rl.reward_service`` section (:class:`~rl.reward.settings.ServiceSettings`,
with the reward's own :class:`~rl.reward.config.RewardConfig` under ``reward``); :data:`FLAGS` are flags of its
fields (:mod:`core.flags`), laid over the file's values.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.errors import require
from core.flags import Flag, Flags
from core.settings import Section
from indexing.config import ClickHouseConfig, Config
from indexing.schema import DOMAINS
from rl.reward.settings import ServiceSettings
from rl.settings import SECTION, RlSettings

FLAGS: Flags[RlSettings] = Flags(
    Section(SECTION, RlSettings),
    Flag("reward_service.domains", "--domain", choices=DOMAINS),
    "reward_service.host",
    "reward_service.port",
    "reward_service.reward.accuracy",
    "reward_service.reward.budget_tokens",
    "reward_service.reward.budget_chars",
    Flag("reward_service.reward.execution_credit", metavar="C"),
    "reward_service.window_ms",
    "reward_service.max_batch_items",
    "reward_service.max_queue_items",
    "reward_service.max_concurrent_requests",
    "reward_service.batch_timeout_s",
    "reward_service.engine_workers",
    "reward_service.warmup",
)
"""The flags of ``prore reward serve`` that set ``rl.reward_service``."""

CLICKHOUSE_FLAGS: Flags[ClickHouseConfig] = Flags(
    Section("clickhouse", ClickHouseConfig), "max_execution_time_s"
)
"""``--max-execution-time-s``: the per-program SQL time limit, ``clickhouse.max_execution_time_s``."""


def service_settings(args: argparse.Namespace, cfg: Config) -> ServiceSettings:
    """The service settings: the config's ``rl.reward_service`` with the flags given laid over it."""
    return FLAGS.over(cfg.section(RlSettings), args).reward_service


def _serve(args: argparse.Namespace, cfg: Config) -> int:
    require("fastapi", "serve")
    require("uvicorn", "serve")
    import uvicorn

    from indexing.workspace import Workspace
    from rl.reward.instances import InstanceIndex
    from rl.reward.scorer import RewardScorer
    from rl.reward.service import create_app

    settings = service_settings(args, cfg)
    cfg = CLICKHOUSE_FLAGS.apply(args, cfg)
    tokenizer = None
    if args.tokenizer:
        require("transformers", "train")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    instances = InstanceIndex.load(Workspace(cfg.workspace), settings.domains, settings.splits)
    scorer = RewardScorer.open(cfg, settings.domains, settings.reward, tokenizer=tokenizer)
    try:
        app = create_app(settings, scorer, instances)
        print(
            f"reward service on http://{settings.host}:{settings.port} ({', '.join(settings.domains)}; "
            f"{len(instances)} instances; accuracy {settings.reward.accuracy}; length in {scorer.unit})",
            flush=True,
        )
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level, access_log=False)
    finally:
        scorer.close()
    return 0


def register_reward(sub: Any) -> None:
    """Add ``prore reward serve`` to the ``prore`` parser."""
    p = sub.add_parser(
        "reward",
        help="serve the layered reward over HTTP for RL trainers",
        description="The layered reward (DESIGN.md section 5) as a shared HTTP service: POST /v1/score, "
        "GET /healthz, /readyz and /metrics (Prometheus).",
    )
    actions = p.add_subparsers(dest="reward_action", metavar="{serve}", required=True)
    s = actions.add_parser(
        "serve",
        help="run the reward service",
        description="Score completions in coalesced batches through the engine. Needs built indexes of the "
        "served domains; instance ids resolve through the workspace's benchmarks (prore bench synth). Every "
        "setting below has a key in the config file's rl.reward_service section; a flag given wins over it.",
    )
    FLAGS.add_to(s)
    CLICKHOUSE_FLAGS.add_to(s)
    s.add_argument(
        "--tokenizer",
        metavar="DIR",
        default=None,
        help="a Hugging Face tokenizer directory: S_l counts tokens (default: characters)",
    )
    s.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default warning)",
    )
    s.set_defaults(handler=_serve)
