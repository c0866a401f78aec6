"""``self-query``: the self-querying retriever of :mod:`serving.self_query` as an evaluation method.

Key-value filters parsed from the request are pushed into Milvus, and the rest of the request runs as one
dense search per text field under them, fused with RRF exactly as the ``dense`` baseline does. So
``self-query`` and ``dense`` differ only by the filters; neither can say OR, NOT or a second semantic
condition. The query API fuses the planner's programs with the same retriever (``serving.api.fuse``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rl.eval.methods import EvalInstance, MethodContext, Outcome, register_method
from serving.self_query import SelfQuery

_KEY = "self_query"


def retriever(ctx: MethodContext) -> SelfQuery:
    """The context's self-querying retriever (its vocabulary read once per context)."""
    got = ctx.cache.get(_KEY)
    if got is None:
        got = ctx.cache[_KEY] = SelfQuery(ctx.index, ctx.schema)
    assert isinstance(got, SelfQuery)
    return got


@register_method(
    "self-query",
    description="rule-based self-querying retriever: key-value filters in Milvus + one dense query",
)
def self_query(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    return [
        Outcome.ranked([doc for doc, _ in got]) if isinstance(got, list) else Outcome.failed(got.one_line())
        for got in retriever(ctx).rankings([i.nl for i in instances], k)
    ]
