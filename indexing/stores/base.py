"""Interfaces of the stores. The engine and the index builder speak only to these.

Whoever makes a store (``make_sql_store``, ``make_vector_store``) owns it and closes it once.

A hit is ``(id, score)``; higher scores are better, lists are ordered best first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Hit = tuple[str, float]
Vectors = npt.NDArray[np.float32]

MAX_HITS = 16_384
"""The most hits one vector search may ask for: Milvus's ``topk`` (and range search ``limit``) ceiling."""

METRICS = ("IP", "COSINE", "L2")
"""The similarity metrics a vector store scores by."""


def similarity(metric: str, queries: Vectors, docs: Vectors) -> npt.NDArray[np.float32]:
    """Each document's score for each query (a row per query, a column per document) as a store's search
    reports it under ``metric``: the inner product (``IP``), the cosine (``COSINE``; 0 for a zero vector) or
    the squared Euclidean distance negated (``L2``, so that higher is better for all three), in float32 as
    Milvus computes them. The engine scores a few candidates in process with it instead of asking the store
    (:mod:`serving.engine.retrieval`).

    >>> q = np.array([[1, 0]], dtype=np.float32)
    >>> d = np.array([[2, 0], [0, 1], [0, 0]], dtype=np.float32)
    >>> [similarity(m, q, d).tolist() for m in METRICS]
    [[[2.0, 0.0, 0.0]], [[1.0, 0.0, 0.0]], [[-1.0, -2.0, -1.0]]]
    """
    q = np.asarray(queries, dtype=np.float32)
    d = np.asarray(docs, dtype=np.float32)
    dots: npt.NDArray[np.float32] = np.asarray(q @ d.T, dtype=np.float32)
    if metric == "IP":
        return dots
    if metric == "COSINE":
        norms = np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(d, axis=1)).astype(np.float32)
        return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    if metric == "L2":
        return np.asarray(-np.square(q[:, None, :] - d[None, :, :]).sum(axis=2), dtype=np.float32)
    raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")


class SqlStore(Protocol):
    """A ClickHouse engine: embedded chDB or a server through clickhouse-connect."""

    def command(self, sql: str, *, params: Mapping[str, Any] | None = None) -> None:
        """Run trusted DDL/DML written by the project (never a program's SQL)."""

    def query(
        self,
        sql: str,
        *,
        settings: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run one SELECT read-only (``readonly=1``) under the configured limits and return its rows.

        ``settings`` add to or tighten the limits; ``params`` bind ClickHouse ``{name:Type}``
        placeholders server-side, so values are never pasted into SQL text.
        """

    def estimate_rows(self, sql: str, *, params: Mapping[str, Any] | None = None) -> int:
        """Rows ClickHouse would read to run the SELECT ``sql`` (``EXPLAIN ESTIMATE``; it does not run)."""

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Append an Arrow table whose columns match ``table``'s."""

    def count(self, table: str) -> int: ...

    def table_exists(self, table: str) -> bool: ...

    def drop_table(self, table: str) -> None: ...

    def close(self) -> None:
        """Release what this store holds (its client, or nothing for the process-wide chDB session); twice is harmless."""


class VectorStore(Protocol):
    """Milvus: one collection per corpus version, one vector field per text/image field."""

    def search(
        self,
        collection: str,
        field: str,
        vectors: Vectors,
        k: int,
        *,
        filter: str | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` ids for each row of ``vectors`` on schema field ``field`` (one batched call).

        ``filter`` is a Milvus boolean expression over the mirrored structured fields.
        """

    def search_band(
        self,
        collection: str,
        field: str,
        vector: Vectors,
        low: float,
        high: float,
        k: int,
        *,
        filter: str | None = None,
    ) -> list[Hit]:
        """At most ``k`` hits of one ``vector`` on ``field`` scoring in ``(low, high]`` (a range search: the
        engine reads a band of equal scores to break ties at a cut by id)."""

    @property
    def metric(self) -> str:
        """What its searches score by: one of :data:`METRICS` (scores as :func:`similarity` computes them)."""

    def fetch_vectors(self, collection: str, field: str, ids: Sequence[str]) -> dict[str, Vectors]:
        """Stored vectors of ``ids`` on ``field`` (the reranker's and a conditioned search's candidates);
        unknown ids are absent."""

    def count(self, collection: str) -> int: ...

    def close(self) -> None:
        """Release this store's share of its client (the last store on a URI closes it); twice is harmless."""


class SparseIndex(Protocol):
    """BM25 over one text field."""

    def search(
        self, queries: Sequence[str], k: int, *, within: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query; with ``within``, ranked among those documents only."""
