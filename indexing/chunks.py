"""The embedded chunks an index build writes, and how a chunk gets its vectors, for both build engines.

A :class:`ChunkSource` yields :class:`EmbeddedChunk` objects: one chunk of the corpus with a row of
vectors per document for each vector field. The ``local`` engine (:class:`indexing.build.LocalChunks`)
and the ``ray`` engine (:class:`indexing.ray_build.RayChunks`) both embed with :func:`embedders_for`'s
embedders through :func:`embed_table`, so they give the same vectors; :mod:`indexing.build` writes them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from indexing.config import Config
from indexing.embedders.base import Embedder, Vectors
from indexing.embedders.cache import StoredEmbedder
from indexing.embedders.registry import make_embedder, vector_key
from indexing.schema import CorpusSchema, Role
from indexing.workspace import Workspace


@dataclass(frozen=True)
class EmbeddedChunk:
    """Chunk ``index`` of the corpus (see :func:`~indexing.corpora.files.iter_corpus`) with one row of
    vectors per document for each vector field."""

    index: int
    table: pa.Table
    vectors: dict[str, Vectors]


class ChunkSource(Protocol):
    """Yields the embedded chunks from ``start_chunk`` on, in chunk order, each exactly once.

    The build closes the iterator when it stops early, so a source may hold resources (a Ray session)
    for exactly as long as it is read.
    """

    def __call__(
        self, ws: Workspace, schema: CorpusSchema, batch_rows: int, start_chunk: int
    ) -> Generator[EmbeddedChunk]: ...


def embedders_for(cfg: Config, schema: CorpusSchema) -> dict[Role, Embedder]:
    """One embedder per role the schema has (unknown names fail here, before anything is written), in front of
    the on-disk store of vectors where ``embedder.vector_cache`` names one."""
    roles = [r for r in (Role.TEXT, Role.IMAGE) if schema.names(r)]
    embedders = {r: make_embedder(cfg.embedder, r) for r in roles}
    if cfg.embedder.vector_cache is None:
        return embedders
    location = cfg.embedder.vector_cache
    return {r: StoredEmbedder(e, location, vector_key(cfg.embedder, r)) for r, e in embedders.items()}


def embed_unique(embedder: Embedder, texts: list[str]) -> Vectors:
    """Rows for ``texts``, encoding each distinct text once (replies share subjects, items share captions)."""
    slots = {t: i for i, t in enumerate(dict.fromkeys(texts))}
    unique = embedder.embed(list(slots))
    return unique[[slots[t] for t in texts]]


def embed_table(embedders: dict[Role, Embedder], schema: CorpusSchema, table: pa.Table) -> dict[str, Vectors]:
    """The vectors of every vector field of ``table``'s rows."""
    return {
        f: embed_unique(embedders[schema.field(f).role], table.column(f).to_pylist())
        for f in schema.vector_fields
    }
