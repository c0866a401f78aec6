"""``self-query``: a LangChain-style self-querying retriever.

The request is parsed by :mod:`rl.baselines.query_parser` into key-value filters and one semantic
query. The filters are pushed into Milvus as a boolean filter expression (structured fields are
mirrored there as scalar fields), and the query runs as one dense search per text field under
that filter, fused with RRF exactly as the ``dense`` baseline does. So ``self-query`` and ``dense``
differ only by the filters; neither can say OR, NOT or a second semantic condition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date
from typing import Any

from core.errors import ProReError
from indexing.schema import CorpusSchema, DType
from indexing.stores.milvus import epoch_seconds as milvus_epoch_seconds
from rl.baselines.fusion import dense_rankings
from rl.baselines.query_parser import Condition, Scalar, Vocabulary, parse_query
from rl.eval.methods import EvalInstance, MethodContext, Outcome, register_method
from serving.dsl.grounding import read_column_values, value_columns

VOCAB_LIMIT = 5000
"""A string field with more distinct values than this is not used as a vocabulary (ids, threads)."""

_VOCAB_KEY = "self_query.vocabulary"


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


def _vocabulary(ctx: MethodContext) -> Vocabulary:
    vocab = ctx.cache.get(_VOCAB_KEY)
    if vocab is None:
        vocab = load_vocabulary(ctx.index, ctx.schema)
        ctx.cache[_VOCAB_KEY] = vocab
    assert isinstance(vocab, Vocabulary)
    return vocab


@register_method(
    "self-query",
    description="rule-based self-querying retriever: key-value filters in Milvus + one dense query",
)
def self_query(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    vocab = _vocabulary(ctx)
    out: list[Outcome | None] = [None] * len(instances)
    # Requests with the same filter share one batched search per field.
    groups: dict[str | None, list[tuple[int, str]]] = {}
    for i, inst in enumerate(instances):
        parsed = parse_query(inst.nl, ctx.schema, vocab)
        groups.setdefault(milvus_filter(parsed.conditions, ctx.schema), []).append((i, parsed.query))
    for expr, members in groups.items():
        try:
            rankings = dense_rankings(ctx, [q for _, q in members], k, filter=expr)
        except ProReError as exc:
            for i, _ in members:
                out[i] = Outcome.failed(exc.one_line())
            continue
        for (i, _), hits in zip(members, rankings, strict=True):
            out[i] = Outcome.ranked([doc for doc, _ in hits])
    return [o if o is not None else Outcome.failed("not searched") for o in out]
