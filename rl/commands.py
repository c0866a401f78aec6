"""CLI subcommands of ``rl``, registered into ``prore`` by :func:`register`."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add this layer's subcommands to the ``prore`` parser."""
    del sub
