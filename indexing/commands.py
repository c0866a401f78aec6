"""CLI subcommands of ``indexing`` (``prore corpus ...``, ``prore index ...``, ``prore stores ...``)."""

from __future__ import annotations

from typing import Any

from indexing import index_commands, stores_commands
from indexing.corpora import commands as corpus_commands


def register(sub: Any) -> None:
    """Add this layer's subcommands to the ``prore`` parser."""
    corpus_commands.register(sub)
    index_commands.register(sub)
    stores_commands.register(sub)
