"""``prore``: one entry point, subcommands registered by each layer.

Each package exposes ``commands.register(subparsers)``; a handler takes the parsed namespace and the
:class:`~indexing.config.Config` and returns an exit code. Typed errors print one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from indexing import commands as indexing_commands
from indexing.config import load_config
from indexing.errors import ProReError
from rl import commands as rl_commands
from serving import commands as serving_commands

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prore",
        description="ProRetrieval: compile natural-language search requests into hybrid retrieval programs.",
        epilog="Run 'prore <command> --help' for the options of a command.",
    )
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help="workspace directory (env PRORE_WORKSPACE; default ./workspace)",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML config (see docs/config.example.yaml)")
    parser.add_argument("--clickhouse-url", metavar="URL", help="ClickHouse server URL (default: embedded chDB)")
    parser.add_argument("--milvus-uri", metavar="URI", help="Milvus server URI (default: embedded Milvus Lite)")
    parser.add_argument("--embedder", metavar="NAME", help="embedder for text and image fields: minilm|hashing|openai")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    indexing_commands.register(sub)
    serving_commands.register(sub)
    rl_commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = load_config(
            args.config,
            workspace=args.workspace,
            clickhouse_url=args.clickhouse_url,
            milvus_uri=args.milvus_uri,
            embedder=args.embedder,
        )
        rc: int = args.handler(args, cfg)
        return rc
    except ProReError as exc:
        print(exc.one_line(), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error interrupted: stopped by the user", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
