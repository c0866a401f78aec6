"""Baseline retrieval methods, registered by name in :mod:`rl.eval.methods` when imported.

``bm25``, ``dense``, ``rrf`` (:mod:`rl.baselines.fusion`), ``self-query``
(:mod:`rl.baselines.self_query`), and the gold-program references ``sql-only`` and ``oracle``
(:mod:`rl.baselines.gold`).
"""

from rl.baselines import fusion, gold, self_query

__all__ = ["fusion", "gold", "self_query"]
