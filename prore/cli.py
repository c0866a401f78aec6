"""``prore``: one entry point, subcommands registered by each layer.

Each package exposes ``commands.register(subparsers)``; a handler takes the parsed namespace and the
:class:`~indexing.config.Config` (every layer's sections, see :mod:`prore.config`) and returns an exit code. Typed errors print one line and exit 2, or
75 (``EX_TEMPFAIL``) when the error is marked ``retryable`` (a store that could not be reached), so a
scheduler such as a Kubernetes Job can retry those and give up on the rest.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from core.errors import ProReError
from core.memory import keep_freed_memory
from core.openmp import wait_passively
from indexing import commands as indexing_commands
from indexing.embedders.registry import EMBEDDERS
from prore import config as prore_config
from prore import k8s as k8s_commands
from prore.config import load_config
from rl import commands as rl_commands
from serving import commands as serving_commands

EXIT_OK = 0
EXIT_BAD_INPUT = 2
"""A typed error that a retry cannot fix: bad input, a missing corpus or index, a broken config."""
EXIT_RETRYABLE = 75
"""A typed error marked ``retryable`` (``EX_TEMPFAIL`` of sysexits.h): a store could not be reached."""
EXIT_INTERRUPTED = 130

EPILOG = f"""\
Run 'prore <command> --help' for the options of a command.

exit status:
  {EXIT_OK}    success
  {EXIT_BAD_INPUT}    bad input or a permanent failure (one line on stderr: error <code>: <message>);
       also a command line argparse rejects
  {EXIT_RETRYABLE}   a temporary failure, such as a store that could not be reached: retry later
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
"""


GLOBAL_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--workspace", "DIR", "workspace directory (env PRORE_WORKSPACE; default ./workspace)"),
    ("--config", "FILE", "YAML config (see docs/config.example.yaml)"),
    ("--clickhouse-url", "URL", "ClickHouse server URL (default: embedded chDB)"),
    ("--milvus-uri", "URI", "Milvus server URI (default: embedded Milvus Lite)"),
    ("--embedder", "NAME", "embedder for text and image fields: " + "|".join(EMBEDDERS.names())),
)
"""Options every command takes, before or after its name: (flag, metavar, help)."""


def _add_global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """Add :data:`GLOBAL_OPTIONS` to ``parser``.

    On a command's parser they default to ``SUPPRESS``: argparse copies a command's namespace over the
    top-level one, and an absent option must not reset a value given before the command. Given in
    both places, the later one wins.
    """
    group = (
        parser.add_argument_group("global options (before or after the command)") if after_command else parser
    )
    for flag, metavar, text in GLOBAL_OPTIONS:
        if flag in parser._option_string_actions:  # a command that defines its own meaning keeps it
            continue
        kwargs = {"default": argparse.SUPPRESS} if after_command else {}
        group.add_argument(flag, metavar=metavar, help=text, **kwargs)  # type: ignore[arg-type]


def _command_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command and sub-command parser below ``parser``, each once (aliases share a parser)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *_command_parsers(child)]
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prore",
        description="ProRetrieval: compile natural-language search requests into hybrid retrieval programs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    indexing_commands.register(sub)
    serving_commands.register(sub)
    rl_commands.register(sub)
    prore_config.register(sub)
    k8s_commands.register(sub, run=main)
    # The layers register their commands without knowing the global options; add them to each here.
    for command in _command_parsers(parser):
        _add_global_options(command, after_command=True)
    return parser


BATCH_COMMANDS = frozenset({"corpus", "index", "bench", "eval", "train"})
"""Commands that run a batch job to its end: their freed memory is kept for reuse (:mod:`core.memory`); the
servers' is not."""


def run() -> None:
    """The ``prore`` console script: :func:`main`, then the process ends with its status (see
    :func:`indexing.index.exit_process`: chDB may otherwise abort in its destructors after the work is done)."""
    from indexing.index import exit_process

    exit_process(main())


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wait_passively()  # every command: its OpenMP threads, and its children's, sleep when idle (core.openmp)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in BATCH_COMMANDS:
        keep_freed_memory()
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
        return EXIT_RETRYABLE if exc.retryable else EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error interrupted: stopped by the user", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
