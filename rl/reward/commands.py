"""``prore reward serve``: the shared reward service.

prore reward serve [--domain ecommerce --domain email] [--host 0.0.0.0] [--port 8300]
                   [--accuracy hit1|satisfy|mrr] [--window-ms 5] [--tokenizer DIR] ...
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from indexing.config import Config
from indexing.errors import require
from indexing.schema import DOMAINS
from rl.reward.config import ACCURACY_MODES, RewardConfig
from rl.reward.settings import ServiceSettings


def settings_from_args(args: argparse.Namespace) -> ServiceSettings:
    """The service settings the flags describe (defaults: :class:`ServiceSettings`'s)."""
    reward = RewardConfig(
        accuracy=args.accuracy,
        budget_tokens=args.budget_tokens,
        budget_chars=args.budget_chars,
        execution_credit=args.execution_credit,
    )
    return ServiceSettings(
        host=args.host,
        port=args.port,
        domains=tuple(dict.fromkeys(args.domain or DOMAINS)),
        window_ms=args.window_ms,
        max_batch_items=args.max_batch_items,
        max_queue_items=args.max_queue_items,
        max_concurrent_requests=args.max_concurrent_requests,
        batch_timeout_s=args.batch_timeout_s,
        engine_workers=args.engine_workers,
        warmup=not args.no_warmup,
        reward=reward,
    )


def _serve(args: argparse.Namespace, cfg: Config) -> int:
    require("fastapi", "serve")
    require("uvicorn", "serve")
    import uvicorn

    from indexing.workspace import Workspace
    from rl.reward.instances import InstanceIndex
    from rl.reward.scorer import RewardScorer
    from rl.reward.service import create_app

    settings = settings_from_args(args)
    if args.max_execution_time_s is not None:
        cfg = cfg.replace(
            clickhouse=dataclasses.replace(cfg.clickhouse, max_execution_time_s=args.max_execution_time_s)
        )
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
    d = ServiceSettings()
    r = RewardConfig()
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
        "served domains; instance ids resolve through the workspace's benchmarks (prore bench synth).",
    )
    s.add_argument(
        "--domain", action="append", choices=DOMAINS, help="domain to serve (repeatable; default all)"
    )
    s.add_argument("--host", default=d.host, help=f"interface to listen on (default {d.host})")
    s.add_argument("--port", type=int, default=d.port, help=f"TCP port (default {d.port})")
    s.add_argument(
        "--accuracy",
        choices=ACCURACY_MODES,
        default=r.accuracy,
        help="S_r: hit1 (gold at rank 1, the paper's), satisfy (first result relevant) or mrr",
    )
    s.add_argument(
        "--tokenizer",
        metavar="DIR",
        default=None,
        help="a Hugging Face tokenizer directory: S_l counts tokens (default: characters)",
    )
    s.add_argument(
        "--budget-tokens",
        type=int,
        default=r.budget_tokens,
        help=f"S_l budget in tokens, with --tokenizer (default {r.budget_tokens})",
    )
    s.add_argument(
        "--budget-chars",
        type=int,
        default=r.budget_chars,
        help=f"S_l budget in characters, without --tokenizer (default {r.budget_chars})",
    )
    s.add_argument(
        "--execution-credit",
        type=float,
        default=r.execution_credit,
        metavar="C",
        help="share of the execution layer a program that runs and misses earns, 0 to 1: 1 is the paper's "
        f"reward, 0 pays running only with accuracy; it sets each result's total (default {r.execution_credit})",
    )
    s.add_argument(
        "--window-ms",
        type=float,
        default=d.window_ms,
        help=f"how long a batch waits for concurrent requests to join (default {d.window_ms})",
    )
    s.add_argument(
        "--max-batch-items",
        type=int,
        default=d.max_batch_items,
        help=f"most items per engine batch (default {d.max_batch_items})",
    )
    s.add_argument(
        "--max-queue-items",
        type=int,
        default=d.max_queue_items,
        help=f"most items waiting before 429 (default {d.max_queue_items})",
    )
    s.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=d.max_concurrent_requests,
        help=f"most requests in flight before 429 (default {d.max_concurrent_requests})",
    )
    s.add_argument(
        "--batch-timeout-s",
        type=float,
        default=d.batch_timeout_s,
        help=f"deadline of one batch; late items score S_e = 0 (default {d.batch_timeout_s})",
    )
    s.add_argument(
        "--engine-workers",
        type=int,
        default=d.engine_workers,
        help=f"batches scored at once, one engine thread each (default {d.engine_workers})",
    )
    s.add_argument(
        "--max-execution-time-s",
        type=float,
        default=None,
        help="per-program SQL time limit (default: clickhouse.max_execution_time_s)",
    )
    s.add_argument("--no-warmup", action="store_true", help="report ready without scoring a warm-up program")
    s.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default warning)",
    )
    s.set_defaults(handler=_serve)
