"""Training the planner on one machine (DESIGN.md section 7): a small Qwen3 from scratch with TRL.

- :mod:`rl.train.tokenizer`: byte-level BPE trained on the project's prompts and programs, ChatML template;
- :mod:`rl.train.model`: Qwen3-architecture models built from a config (sizes measured on 2 cores);
- :mod:`rl.train.sft`, :mod:`rl.train.grpo`: TRL's ``SFTTrainer`` and ``GRPOTrainer`` (GRPO and DAPO);
- :mod:`rl.train.rewards`: the layered reward as TRL reward functions (in-process or the reward service);
- :mod:`rl.train.augment`: SFT pairs repaired by verified mutation (:mod:`rl.mutate`);
- the trained planner is evaluated through :mod:`rl.eval.planner_methods` (vLLM), beside the few-shot LLM baseline;
- ``defaults.yaml``: the recipe's numbers, citing the paper and saying where the local profile departs.

torch, transformers, trl and vllm are imported inside the functions that need them (``pip install
'proretrieval[train]'``).
"""
