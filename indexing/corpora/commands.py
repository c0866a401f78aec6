"""CLI subcommands (to be filled)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add these subcommands to the ``prore`` parser."""
    del sub
