"""Baseline retrieval methods, registered by name in :mod:`rl.eval.methods` when their module is imported.

``bm25``, ``dense``, ``rrf`` (:mod:`rl.baselines.fusion`), ``self-query``
(:mod:`rl.baselines.self_query`, the retriever of :mod:`serving.self_query`), and the
gold-program references ``sql-only`` and ``oracle`` (:mod:`rl.baselines.gold`).
"""
