"""One config file for every layer: indexing's sections plus the ones ``serving`` and ``rl`` declare.

:data:`LAYERS` composes the sections each layer declares (``SECTIONS`` of ``serving.settings`` and
``rl.settings``); :func:`load_config` hands them to :func:`indexing.config.load_config`, which registers them and
reads the file, then the environment, so an unknown key anywhere is one typed error line. Nothing is registered
by importing a module. ``prore config`` prints the composed config.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from core.settings import Section
from indexing import config as indexing_config
from indexing.config import BUILTIN_SECTIONS, Config
from rl.settings import SECTIONS as RL_SECTIONS
from serving.settings import SECTIONS as SERVING_SECTIONS

LAYERS: tuple[Section, ...] = (*SERVING_SECTIONS, *RL_SECTIONS)
"""The sections of the layers above indexing, in layer order: one per key of :data:`indexing.config.LAYER_KEYS`."""


def load_config(path: str | Path | None = None, **flags: Any) -> Config:
    """:func:`indexing.config.load_config` with every layer's section known: defaults < the file < the
    environment < ``flags`` (prore's global options; a command lays its own over the result)."""
    return indexing_config.load_config(path, sections=LAYERS, **flags)


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
    out: dict[str, Any] = {"workspace": str(cfg.workspace)}
    out.update({name: _plain(getattr(cfg, name)) for name in BUILTIN_SECTIONS})
    out.update({section.name: _plain(cfg.section(section.cls)) for section in LAYERS})
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
        "environment (PRORE_WORKSPACE, PRORE_PLANNER_*) < global flags; a command's own flags go over it), "
        "every section and key, as a YAML file --config accepts.",
    )
    p.add_argument("--defaults", action="store_true", help="print the defaults instead")
    p.set_defaults(handler=_show)
