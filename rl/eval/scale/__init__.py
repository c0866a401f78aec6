"""How the engine scales with its corpus: build time, memory, latency and answer quality from thousands to a
million products on the local Milvus server, per embedder and planning candidate. ``bench/scale.py`` runs it
(its docstring says what it measures and how); the work is here:

- :mod:`~rl.eval.scale.runs`: corpus sizes, one run (an embedder at a size), the planning candidates;
- :mod:`~rl.eval.scale.build`: a run's corpus, index and benchmark, built once per workspace;
- :mod:`~rl.eval.scale.memory`: peak memory of the run and of its Milvus server, per phase;
- :mod:`~rl.eval.scale.measure`: latency, empty share and P@1 per candidate, broken down by
  :mod:`~rl.eval.scale.diagnosis`;
- :mod:`~rl.eval.scale.worker`: one run from start to end in a process of its own;
- :mod:`~rl.eval.scale.estimates`: the sizes a neural embedder can afford, build times, power-law fits;
- :mod:`~rl.eval.scale.report` and :mod:`~rl.eval.scale.plots`: ratios, goals, the JSON, the table and
  the curves.
"""
