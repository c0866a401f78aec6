"""The ``ray`` engine of the index build: Ray Data reads the corpus and embeds it in a pool of actors.

``prore index build DOMAIN --engine ray`` (or ``build.engine: ray``) streams one Ray Data dataset:

1. **read**: one input row per corpus part that still holds uncommitted chunks; a task reads the part's
   chunks (:func:`~indexing.corpora.files.iter_part`, the very chunks of the ``local`` engine) and tags
   each row with its chunk number. A streaming repartition then cuts the stream into blocks of one
   chunk's size, so the actors share even a corpus of a single part.
2. **embed**: ``map_batches`` over a fixed pool of ``build.ray_actors`` actors (``ActorPoolStrategy``),
   each holding one embedder per role, appends one fixed-size-list column per vector field.
3. **write**: the driver, the process that runs the build, reads the stream in order
   (``preserve_order``), regroups the rows into whole chunks and hands them to :mod:`indexing.build`,
   which writes ClickHouse and Milvus, commits the journal, builds BM25, checks every store's count
   and publishes, exactly as for the ``local`` engine (same version layout, same build key).

**Why the driver writes.** Embedded chDB binds one path per process and Milvus Lite is a file one
process opens, so an actor cannot write the stores the driver holds open; and a single writer keeps
the journal a prefix of committed chunks, which is what resuming relies on. The driver's writes
overlap the actors' embedding of the chunks behind them.

**Resume after a kill.** The journal is the build's, so a killed Ray build resumes like any other
(with either engine): the resumed pipeline reads only from the first uncommitted chunk on. When the
driver dies, Ray ends its actors with it (a local instance is stopped by Ray's reaper process).

**Which Ray.** An already initialized Ray is used as it is; otherwise ``build.ray_address`` or
``RAY_ADDRESS`` (which a KubeRay RayJob sets) is joined; otherwise a local Ray sized to the pool
(``ray_actors + 1`` CPUs, no dashboard) is started for the build and stopped when the stream ends.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.errors import ProReError, require
from core.logs import drop_messages
from indexing.chunks import EmbeddedChunk, embed_table, embedders_for
from indexing.config import Config, EmbedderConfig
from indexing.corpora.files import arrow_schema, iter_part, part_chunks, part_paths
from indexing.embedders.base import Vectors
from indexing.errors import StoreError
from indexing.schema import CorpusSchema, schema_for
from indexing.workspace import Workspace

CHUNK_COLUMN = "__chunk"
"""The chunk number each row carries through the pipeline."""
VECTOR_PREFIX = "__vector__"
"""Prefix of the column holding a vector field's vectors (``__vector__title``)."""


@dataclass(frozen=True)
class PartPlan:
    """One corpus part: its path, the number of its first chunk in the whole corpus, its rows."""

    path: str
    first_chunk: int
    rows: int

    def chunk_rows(self, batch_rows: int) -> list[int]:
        """Rows of each of the part's chunks."""
        return [min(batch_rows, self.rows - start) for start in range(0, self.rows, batch_rows)]


def plan_parts(ws: Workspace, schema: CorpusSchema, batch_rows: int) -> list[PartPlan]:
    """Every part of the workspace corpus with its chunk numbering, from the parquet footers alone."""
    plans: list[PartPlan] = []
    first = 0
    for part in part_paths(ws, schema.domain):
        plans.append(PartPlan(str(part), first, pq.ParquetFile(part).metadata.num_rows))
        first += part_chunks(part, batch_rows)
    return plans


def read_parts(batch: pa.Table, *, batch_rows: int, start_chunk: int) -> Iterator[pa.Table]:
    """The read stage: the chunks of the parts in ``batch`` from ``start_chunk`` on, rows tagged with their chunk.

    A part whose chunks differ from its plan (the corpus changed under the build) is a :class:`StoreError`.
    """
    for path, first, rows in zip(
        *(batch.column(c).to_pylist() for c in ("path", "first_chunk", "rows")), strict=True
    ):
        want = PartPlan(path, first, rows).chunk_rows(batch_rows)
        got = 0
        for k, table in enumerate(iter_part(Path(path), batch_rows)):
            if k >= len(want) or table.num_rows != want[k]:
                raise StoreError(
                    f"corpus part {path} changed while the index was built", code="corpus_changed"
                )
            got += 1
            if first + k >= start_chunk:
                yield table.append_column(
                    CHUNK_COLUMN, pa.array(np.full(table.num_rows, first + k), pa.int64())
                )
        if got != len(want):
            raise StoreError(f"corpus part {path} changed while the index was built", code="corpus_changed")


class EmbedActor:
    """The embed stage: one actor of the pool, holding one embedder per role of the corpus."""

    def __init__(self, embedder: EmbedderConfig, domain: str) -> None:
        self.schema = schema_for(domain)
        self.embedders = embedders_for(Config(embedder=embedder), self.schema)

    def __call__(self, batch: pa.Table) -> pa.Table:
        for f, vectors in embed_table(self.embedders, self.schema, batch).items():
            flat = pa.array(vectors.reshape(-1), pa.float32())
            batch = batch.append_column(
                VECTOR_PREFIX + f, pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
            )
        return batch


@dataclass(frozen=True)
class RayChunks:
    """The ``ray`` engine as the build's :class:`~indexing.chunks.ChunkSource` (see the module docstring)."""

    embedder: EmbedderConfig
    actors: int
    address: str | None = None

    @classmethod
    def from_config(cls, cfg: Config) -> RayChunks:
        """The engine ``cfg.build`` describes; a missing ``ray`` extra fails here, before any write."""
        require("ray.data", "ray")
        return cls(cfg.embedder, cfg.build.ray_actors, cfg.build.ray_address)

    def __call__(
        self, ws: Workspace, schema: CorpusSchema, batch_rows: int, start_chunk: int
    ) -> Generator[EmbeddedChunk]:
        parts = plan_parts(ws, schema, batch_rows)
        expected = {
            p.first_chunk + k: n
            for p in parts
            for k, n in enumerate(p.chunk_rows(batch_rows))
            if p.first_chunk + k >= start_chunk
        }
        if not expected:
            return
        todo = [p for p in parts if p.first_chunk + len(p.chunk_rows(batch_rows)) > start_chunk]
        with ray_session(self.address, self.actors):
            batches = self._stream(todo, schema, batch_rows, start_chunk)
            yield from regroup(batches, schema, expected)

    def _stream(
        self, parts: list[PartPlan], schema: CorpusSchema, batch_rows: int, start_chunk: int
    ) -> Iterator[pa.Table]:
        import ray.data

        items = [{"path": p.path, "first_chunk": p.first_chunk, "rows": p.rows} for p in parts]
        ds: ray.data.Dataset = ray.data.from_items(items, override_num_blocks=len(items))
        ds.context.execution_options.preserve_order = True
        ds.context.enable_progress_bars = False  # the build draws its own bars, stage by stage
        # A task's own exception, not Ray Data's UserCodeException that keeps only its text.
        ds.context.raise_original_map_exception = True
        read = functools.partial(read_parts, batch_rows=batch_rows, start_chunk=start_chunk)
        ds = ds.map_batches(read, batch_size=1, batch_format="pyarrow")
        ds = ds.repartition(target_num_rows_per_block=batch_rows)
        ds = ds.map_batches(
            EmbedActor,
            fn_constructor_args=(self.embedder, schema.domain),
            batch_size=batch_rows,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=self.actors),
            num_cpus=1,
            udf_modifying_row_count=False,
        )
        try:
            yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")
        except ray.exceptions.RayError as exc:
            # A typed error raised in a task or an actor stays that error for the user (one line, its code).
            typed = typed_cause(exc)
            if typed is None:
                raise
            raise typed from exc


def regroup(
    batches: Iterable[pa.Table], schema: CorpusSchema, expected: dict[int, int]
) -> Iterator[EmbeddedChunk]:
    """Whole chunks, in order, from a stream of tagged rows: ``expected`` maps each chunk to its rows.

    Rows beyond a chunk's count, or chunks missing at the end, are a :class:`StoreError`: nothing
    of such a stream reaches a store past the last whole chunk.
    """
    target = arrow_schema(schema)
    order = sorted(expected)
    pieces: dict[int, list[pa.Table]] = {}
    have: dict[int, int] = {}
    at = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        tags = batch.column(CHUNK_COLUMN)
        for chunk in pc.unique(tags).to_pylist():
            piece = batch.filter(pc.equal(tags, chunk))
            have[chunk] = have.get(chunk, 0) + piece.num_rows
            if chunk not in expected or have[chunk] > expected[chunk]:
                raise StoreError(
                    f"the Ray pipeline returned rows of chunk {chunk} more than once", code="ray_stream"
                )
            pieces.setdefault(chunk, []).append(piece)
        while at < len(order) and have.get(order[at]) == expected[order[at]]:
            yield _chunk(order[at], pa.concat_tables(pieces.pop(order[at])), schema, target)
            at += 1
    if at < len(order):
        raise StoreError(
            f"the Ray pipeline ended before chunk {order[at]} was complete ({have.get(order[at], 0)} of "
            f"{expected[order[at]]} rows)",
            code="ray_stream",
        )


def _chunk(index: int, table: pa.Table, schema: CorpusSchema, target: pa.Schema) -> EmbeddedChunk:
    table = table.combine_chunks()
    vectors: dict[str, Vectors] = {}
    for f in schema.vector_fields:
        column = table.column(VECTOR_PREFIX + f)
        dim = column.type.list_size
        flat = (
            pa.concat_arrays([c.flatten() for c in column.chunks])
            if column.num_chunks
            else pa.array([], pa.float32())
        )
        vectors[f] = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(
            table.num_rows, dim
        )
    return EmbeddedChunk(index, table.select(target.names).cast(target), vectors)


def typed_cause(exc: BaseException) -> ProReError | None:
    """The project's error behind a Ray exception (a task's error travels as its ``cause``), if any.

    Ray's own wrappers (``RayTaskError(StoreError)``) are subclasses of the error they carry; the
    original is the one returned.
    """
    import ray.exceptions

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ProReError) and not isinstance(e, ray.exceptions.RayError):
            return e
        todo += [e.__context__, e.__cause__, getattr(e, "cause", None)]
    return None


@contextlib.contextmanager
def ray_session(address: str | None, actors: int) -> Iterator[None]:
    """Ray for one build: the initialized one, the cluster at ``address`` / ``RAY_ADDRESS``, or a local one."""
    import ray

    # Ray Data's INFO lines per run are noise beside the build's own bars, and so is its note that its
    # own bars are off (the build draws one bar per stage).
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    drop_messages("ray.data._internal.progress", "Progress bars disabled")
    if ray.is_initialized():
        yield
        return
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    target = address or os.environ.get("RAY_ADDRESS")
    if target:
        ray.init(address=target, **options)
    else:
        # This instance is the build's own, on this machine, for as long as the build runs.
        drop_messages(
            "ray._private.authentication.authentication_token_setup", "Token authentication is enabled"
        )
        ray.init(num_cpus=actors + 1, include_dashboard=False, **options)
    try:
        yield
    finally:
        ray.shutdown()
