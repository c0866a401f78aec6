"""One config file for every layer: indexing's sections plus those ``serving`` and ``rl`` register.

:data:`LAYER_SETTINGS` names each layer's settings module; importing it registers its section (see
:func:`indexing.config.register_section`). :func:`load_config` imports them, then reads the file, so
an unknown key anywhere is one typed error line. ``prore config`` prints the composed config.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import yaml

from indexing import config as indexing_config
from indexing.config import BUILTIN_SECTIONS, Config

LAYER_SETTINGS: tuple[str, ...] = ("serving.settings", "rl.settings")
"""Settings modules of the layers above indexing, imported (lazily: they load the engine) before a file is read."""


def register_layers() -> None:
    """Import every layer's settings module, registering its config section."""
    for module in LAYER_SETTINGS:
        importlib.import_module(module)


def load_config(path: str | Path | None = None, **flags: Any) -> Config:
    """:func:`indexing.config.load_config` with every layer's section known."""
    register_layers()
    return indexing_config.load_config(path, **flags)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def as_mapping(cfg: Config) -> dict[str, Any]:
    """``cfg`` as the mapping a YAML config file holds (every section, every key)."""
    register_layers()
    out: dict[str, Any] = {"workspace": str(cfg.workspace)}
    out.update({name: _plain(getattr(cfg, name)) for name in BUILTIN_SECTIONS})
    for name in indexing_config.SECTIONS.names():
        out[name] = _plain(cfg.section(indexing_config.SECTIONS.get(name)))
    return out


def _show(args: argparse.Namespace, cfg: Config) -> int:
    shown = Config() if args.defaults else cfg
    print(yaml.safe_dump(as_mapping(shown), sort_keys=False, default_flow_style=False).rstrip())
    return 0


def register(sub: Any) -> None:
    """Add ``prore config`` to the ``prore`` parser."""
    p = sub.add_parser(
        "config",
        help="print the effective configuration of every layer as YAML",
        description="Print the configuration the other commands run with (defaults < --config file < "
        "PRORE_WORKSPACE < flags), every section and key, as a YAML file --config accepts.",
    )
    p.add_argument("--defaults", action="store_true", help="print the defaults instead")
    p.set_defaults(handler=_show)
