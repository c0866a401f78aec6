"""The execution engine: runs retrieval programs against one index (DESIGN.md sections 3 and 6).

>>> from serving.engine import Engine  # doctest: +SKIP
>>> engine = Engine.open(cfg, "ecommerce")  # doctest: +SKIP
>>> engine.execute(parse_program(text), k=10).ids  # doctest: +SKIP
"""

from serving.engine.engine import Engine
from serving.engine.prepared import BatchOutcome, EngineStats, Prepared
from serving.engine.ranking import RRF_K, Ranked, rank_results, rrf_fuse
from serving.engine.rerank import CosineReranker, Reranker, RerankRequest
from serving.engine.results import (
    STAGES,
    DeadlineExceeded,
    ExecutionError,
    ExecutionLimits,
    ExecutionResult,
    candidate_name,
)
from serving.engine.retrieval import RetrievalRequest
from serving.settings import CacheSizes, PlanningOptions

__all__ = [
    "RRF_K",
    "STAGES",
    "BatchOutcome",
    "CacheSizes",
    "CosineReranker",
    "DeadlineExceeded",
    "Engine",
    "EngineStats",
    "ExecutionError",
    "ExecutionLimits",
    "ExecutionResult",
    "PlanningOptions",
    "Prepared",
    "Ranked",
    "RerankRequest",
    "Reranker",
    "RetrievalRequest",
    "candidate_name",
    "rank_results",
    "rrf_fuse",
]
