"""Baseline retrieval methods, registered by name in :mod:`rl.eval.methods` when their module is imported.

``bm25``, ``dense``, ``rrf`` (:mod:`rl.baselines.fusion`), ``self-query``
(:mod:`rl.baselines.self_query`, parsing with :mod:`rl.baselines.query_parser`), and the
gold-program references ``sql-only`` and ``oracle`` (:mod:`rl.baselines.gold`).
"""
