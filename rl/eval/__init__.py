"""Evaluation: metrics, bootstrap CIs, the method registry, runs, reports and comparisons.

>>> from rl.eval import score_query
>>> score_query(["P2", "P1"], "P1").hit3
1.0
"""

from rl.eval.bootstrap import Interval, bootstrap_ci, bootstrap_many
from rl.eval.errors import DuplicateMethod, EvalError, OracleMismatch, UnknownMethod
from rl.eval.methods import (
    MethodContext,
    MethodSpec,
    Outcome,
    available_methods,
    get_method,
    register_method,
)
from rl.eval.metrics import (
    METRICS,
    QueryScores,
    execution_success_rate,
    hit_at,
    ndcg_at,
    rank_of,
    reciprocal_rank,
    score_query,
)
from rl.eval.runner import EvalRun, QueryResult, evaluate, modality_group

__all__ = [
    "METRICS",
    "DuplicateMethod",
    "EvalError",
    "EvalRun",
    "Interval",
    "MethodContext",
    "MethodSpec",
    "OracleMismatch",
    "Outcome",
    "QueryResult",
    "QueryScores",
    "UnknownMethod",
    "available_methods",
    "bootstrap_ci",
    "bootstrap_many",
    "evaluate",
    "execution_success_rate",
    "get_method",
    "hit_at",
    "modality_group",
    "ndcg_at",
    "rank_of",
    "reciprocal_rank",
    "register_method",
    "score_query",
]
