"""Embedders, chosen by name: ``minilm`` (offline all-MiniLM-L6-v2), ``hashing`` and ``openai``.

Use :func:`make_embedder` (a new instance) or :func:`shared_embedder` (the per-process cached one).
"""

from core.registry import Registry
from indexing.embedders.base import Embedder, EmbedderError, EmbedderUnavailable, normalize_rows
from indexing.embedders.cache import CachedEmbedder
from indexing.embedders.registry import EMBEDDERS, embedder_name, make_embedder, shared_embedder

__all__ = [
    "EMBEDDERS",
    "CachedEmbedder",
    "Embedder",
    "EmbedderError",
    "EmbedderUnavailable",
    "Registry",
    "embedder_name",
    "make_embedder",
    "normalize_rows",
    "shared_embedder",
]
