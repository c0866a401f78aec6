"""Training the planner with verl (DESIGN.md section 7): datasets, the reward function, recipes, launch.

- :mod:`rl.verl.export`: verl's RL and SFT parquet from a benchmark;
- :mod:`rl.verl.reward_fn`: ``compute_score``, verl's custom reward function, a client of the reward service;
- :mod:`rl.verl.recipes`: SFT, GRPO and DAPO as verl overrides from one defaults file;
- :mod:`rl.verl.launch`: the entrypoint and overrides a Ray job runs.

Nothing here imports verl: verl lives in its own environment (``scripts/verl-env.sh``), and these modules
only write what it reads.
"""
