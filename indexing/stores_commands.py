"""``prore stores up``, ``prore stores down`` and ``prore stores status``: the local Milvus server.

See :mod:`indexing.stores.server`. The server lives in ``<workspace>/milvus-server/``; the engine
uses it with ``--milvus-uri`` and the URI ``status`` prints.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from core.errors import ConfigError
from indexing.config import Config


def register(sub: Any) -> None:
    """Add ``prore stores ...`` to the ``prore`` parser."""
    stores = sub.add_parser(
        "stores",
        help="start, stop and show the local Milvus server of the workspace",
        description="A local Milvus standalone server (the real C++ server of the 'milvus' package) in "
        "<workspace>/milvus-server. Milvus Lite needs none of this; switch from about 100k documents.",
    )
    ssub = stores.add_subparsers(dest="stores_command", metavar="<stores command>", required=True)
    up = ssub.add_parser("up", help="start the server (kept if running) and wait until it answers")
    up.add_argument("--port", metavar="PORT", help="gRPC port (default 19530, or a free one if taken)")
    up.add_argument(
        "--timeout",
        metavar="S",
        default="180",
        help="seconds to wait for it to answer (default 180); after a crash, a server that hangs is started once more",
    )
    up.set_defaults(handler=cmd_up)
    down = ssub.add_parser("down", help="stop the server cleanly; its data stays")
    down.set_defaults(handler=cmd_down)
    st = ssub.add_parser("status", help="say whether the server runs, and its URI")
    st.add_argument("--json", action="store_true", help="print JSON instead of text")
    st.set_defaults(handler=cmd_status)


def _number(text: str, flag: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise ConfigError(f"{flag} must be a number, got {text!r}") from None
    if value <= 0:
        raise ConfigError(f"{flag} must be positive, got {text!r}")
    return value


def cmd_up(args: argparse.Namespace, cfg: Config) -> int:
    """Handler of ``prore stores up``."""
    from indexing.stores import server

    port = _number(args.port, "--port", int) if args.port is not None else None
    timeout = _number(args.timeout, "--timeout", float)
    info = server.start(server.server_dir(cfg.workspace), port=port, timeout_s=timeout)
    print(info.summary())
    return 0


def cmd_down(args: argparse.Namespace, cfg: Config) -> int:
    """Handler of ``prore stores down``."""
    from indexing.stores import server

    directory = server.server_dir(cfg.workspace)
    print(
        f"Milvus server: stopped ({directory})"
        if server.stop(directory)
        else f"Milvus server: was not running ({directory})"
    )
    return 0


def cmd_status(args: argparse.Namespace, cfg: Config) -> int:
    """Handler of ``prore stores status``: exit 0 whether or not it runs."""
    from indexing.stores import server

    info = server.status(server.server_dir(cfg.workspace))
    print(json.dumps(info.to_dict(), sort_keys=True) if args.json else info.summary())
    return 0
