"""The self-querying retriever: a LangChain-style self-query, with rules where LangChain asks an LLM.

The request is parsed by :mod:`serving.query_parser` into key-value filters and one semantic query. The
filters are pushed into Milvus as a boolean filter expression (structured fields are mirrored there as
scalar fields), and the query runs as one dense search per text field under that filter, the fields'
lists fused by reciprocal rank (the engine's RRF, :func:`serving.engine.ranking.rrf_fuse`). It can say
no OR, no NOT and no second semantic condition, but it reads wording no planner was trained on.

It is the evaluation's ``self-query`` baseline (:mod:`rl.baselines.self_query`) and the query API's fusion
partner (``serving.api.fuse: self-query``, :mod:`serving.api.service`): the planner's programs and this
retriever's ranking, fused (:func:`serving.engine.results.fuse`), answer unseen wording better than either
alone (README, "Training the planner").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from core.errors import ProReError
from indexing.schema import CorpusSchema, DType
from indexing.stores.base import Hit
from indexing.stores.milvus import epoch_seconds as milvus_epoch_seconds
from serving.dsl.grounding import read_column_values, value_columns
from serving.engine.ranking import rrf_fuse
from serving.query_parser import Condition, Scalar, Vocabulary, parse_query

VOCAB_LIMIT = 5000
"""A string field with more distinct values than this is not used as a vocabulary (ids, threads)."""

FIELD_DEPTH_FACTOR = 2
"""Each field contributes its top ``2 * k`` before fusion: a document just below the cut in several lists
can still make the fused top ``k``. Deeper lists cost Milvus time in proportion for little change in the top."""

vocabulary_fields = value_columns
"""Structured string fields whose values can be recognized in a request (:func:`serving.dsl.grounding.value_columns`)."""


def load_vocabulary(index: Any, schema: CorpusSchema, limit: int = VOCAB_LIMIT) -> Vocabulary:
    """Distinct values of the categorical fields, read from the index's SQL table
    (:func:`serving.dsl.grounding.read_column_values`, which grounded decoding reads too)."""
    return Vocabulary(read_column_values(index, schema, limit))


def epoch_seconds(value: date, dtype: DType) -> str:
    """A date as the Milvus mirror stores it (INT64 epoch seconds; see ``indexing.stores.milvus``)."""
    return str(milvus_epoch_seconds(value))


DateRenderer = Callable[[date, DType], str]


def milvus_literal(value: Scalar, dtype: DType, dates: DateRenderer = epoch_seconds) -> str:
    """``value`` as a Milvus expression literal for a field of ``dtype``.

    >>> milvus_literal("Levi's", DType.STRING), milvus_literal(True, DType.BOOL), milvus_literal(200.0, DType.FLOAT)
    ('"Levi\\'s"', 'true', '200.0')
    """
    if dtype is DType.BOOL:
        return "true" if value else "false"
    if dtype in (DType.DATE, DType.DATETIME):
        if not isinstance(value, date):
            raise ValueError(f"a date field needs a date, got {value!r}")
        return dates(value, dtype)
    if dtype is DType.INT:
        return str(int(value))  # type: ignore[arg-type]
    if dtype is DType.FLOAT:
        return repr(float(value))  # type: ignore[arg-type]
    # JSON string syntax is Milvus's: double quotes, backslash escapes.
    return json.dumps(str(value), ensure_ascii=False)


def milvus_filter(
    conditions: Sequence[Condition], schema: CorpusSchema, dates: DateRenderer = epoch_seconds
) -> str | None:
    """The conditions as one Milvus boolean expression (``and`` of comparisons), or ``None``.

    >>> from indexing.schema import PRODUCTS
    >>> milvus_filter([Condition("brand", "==", "Sony"), Condition("price", "<", 200.0)], PRODUCTS)
    'brand == "Sony" and price < 200.0'
    """
    parts = [
        f"{c.field} {c.op} {milvus_literal(c.value, schema.field(c.field).dtype, dates)}" for c in conditions
    ]
    return " and ".join(parts) or None


def fuse_fields(per_field: Sequence[Sequence[Sequence[Hit]]], k: int) -> list[list[Hit]]:
    """Per query, the RRF of that query's hit list from each field: ``per_field[f][q]`` -> ``out[q]``."""
    n = len(per_field[0]) if per_field else 0
    return [rrf_fuse([lists[q] for lists in per_field], k) for q in range(n)]


def dense_rankings(
    index: Any, schema: CorpusSchema, queries: Sequence[str], k: int, *, filter: str | None = None,
    depth: int | None = None,
) -> list[list[Hit]]:  # fmt: skip
    """Dense search of ``queries`` on every text field of ``index`` (top ``depth``, default ``2 * k``), fused per
    query, top ``k``; ``filter`` is a Milvus boolean expression applied inside each search."""
    depth = depth or FIELD_DEPTH_FACTOR * k
    per_field = [index.dense_search(f, list(queries), depth, filter=filter) for f in schema.text_fields]
    return fuse_fields(per_field, k)


@dataclass(frozen=True)
class SelfQueryPlan:
    """What the retriever searches for one request: a Milvus filter (or none) and the semantic query."""

    filter: str | None
    query: str


class SelfQuery:
    """The self-querying retriever over one index (its handle and schema); the vocabulary of the categorical
    fields is read from the index on first use. Not thread-safe: call it from the index's own thread."""

    def __init__(self, index: Any, schema: CorpusSchema, *, vocabulary: Vocabulary | None = None) -> None:
        self.index, self.schema = index, schema
        self._vocabulary = vocabulary

    @property
    def vocabulary(self) -> Vocabulary:
        if self._vocabulary is None:
            self._vocabulary = load_vocabulary(self.index, self.schema)
        return self._vocabulary

    def plan(self, request: str) -> SelfQueryPlan:
        """The filter and query ``request`` parses into."""
        parsed = parse_query(request, self.schema, self.vocabulary)
        return SelfQueryPlan(milvus_filter(parsed.conditions, self.schema), parsed.query)

    def rankings(self, requests: Sequence[str], k: int) -> list[list[Hit] | ProReError]:
        """The top ``k`` of each request, or the typed error of the search that failed it (:meth:`search`)."""
        return self.search([self.plan(nl) for nl in requests], k)

    def search(self, plans: Sequence[SelfQueryPlan], k: int) -> list[list[Hit] | ProReError]:
        """The top ``k`` of each parsed request, or the typed error of the search that failed it: plans with
        the same filter share one batched search per field, and a failure fails that group alone."""
        out: list[list[Hit] | ProReError] = [[] for _ in plans]
        groups: dict[str | None, list[int]] = {}
        for i, p in enumerate(plans):
            groups.setdefault(p.filter, []).append(i)
        for expr, members in groups.items():
            got: list[list[Hit] | ProReError]
            try:
                got = list(
                    dense_rankings(self.index, self.schema, [plans[i].query for i in members], k, filter=expr)
                )
            except ProReError as exc:
                got = [exc] * len(members)
            for i, hits in zip(members, got, strict=True):
                out[i] = hits
        return out
