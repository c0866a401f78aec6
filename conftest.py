"""Collection of the package modules' docstring examples (``--doctest-modules``, see pyproject.toml).

Every module of the packages is imported to collect its examples, except these (paths relative to here):

- ``rl/verl/cpu``: imports verl, which only ``.venv-verl`` has, and importing it makes verl's current
  platform the CPU for the whole process; verl loads it, nothing else does. It has no examples.
- ``serving/kserve_openai.py``: importing it imports vLLM and KServe (about 15 s in each test process) and
  registers aliases of moved vLLM modules in ``sys.modules`` (:mod:`serving.kserve_compat`) for the
  whole process. It has no examples; tests/serving/test_kserve.py serves it in a process of its own.
"""

collect_ignore = ["rl/verl/cpu", "serving/kserve_openai.py"]
