"""GRPO and DAPO on the planner with TRL's ``GRPOTrainer``: the paper's RL stage, on one machine.

The recipe's options are TRL's own: ``loss_type`` (``grpo`` or ``dapo``), ``epsilon`` / ``epsilon_high``
for clipping, ``beta`` for the KL to the reference (the initial) model. The reward is the layered reward
(:mod:`rl.train.rewards`), scored in-process on the workspace's indexes or by the reward service
(``reward_url``). Completions are generated with transformers' ``generate`` (TRL's vLLM paths need CUDA
for weight sync; see STACK.md).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexing.config import Config
from indexing.workspace import Workspace
from rl.errors import TrainError
from rl.prompt import Profile, card_profile, read_card
from rl.train import logs
from rl.train.config import RlParams, load_defaults
from rl.train.data import exemplar_shots, load_instances, rl_row, split_train_val, to_dataset, window
from rl.train.familiarity import carry_familiarity
from rl.train.model import build_model, load_model, parameter_count, size_named
from rl.train.prompt_filter import (
    filter_key,
    filter_rows,
    record_filter,
    recorded_rows,
    sample,
    saved_filter,
)
from rl.train.rewards import LayeredReward, in_process, remote, reward_config
from rl.train.run import (
    FINAL,
    Precision,
    common_args,
    run_tokenizer,
    threads,
    to_jsonable,
    trained_in,
    write_card,
    write_run,
)
from rl.train.tokenizer import Split, chat_texts
from serving.exemplars import open_for_planner


@dataclass(frozen=True)
class RlJob:
    """One GRPO or DAPO run."""

    cfg: Config
    domains: tuple[str, ...]
    out: Path
    algorithm: str = "grpo"
    params: RlParams = field(default_factory=lambda: load_defaults().grpo)
    init: Path | None = None
    """The SFT model to start from (``<sft run>/final``); without one, a random model of ``size``."""
    size: str = "s"
    profile: Profile | None = None
    """Prompt profile; default: the init model's card, else ``short``."""
    reward_url: str | None = None
    reward_target: str = "hit1"
    limit: int | None = None
    offset: int = 0
    """Skip this many training instances per domain first: with an SFT run's ``--limit``, prompts it never saw."""
    seed: int = 0
    precision: Precision = "auto"
    """``auto``, ``fp32`` or ``bf16`` (:func:`rl.train.run.uses_bf16`)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's forward in the backward instead of keeping its activations (memory for time)."""
    vocab_size: int = 4096
    max_token_chars: int = 24
    split: Split = "lines"
    """The tokenizer's pre-split when the run trains one (no ``init``)."""
    bench_workspace: Path | None = None
    """Where the benchmark is read (default: ``cfg``'s workspace, which also serves the indexes)."""


def run_rl(job: RlJob) -> dict[str, Any]:
    """Train with GRPO or DAPO; the last model goes to ``out/final``; returns a summary."""
    import torch
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    if job.algorithm not in ("grpo", "dapo"):
        raise TrainError(f"unknown RL algorithm {job.algorithm!r}; choose grpo or dapo", code="train_recipe")
    torch.set_num_threads(threads())
    profile: Profile = job.profile or (card_profile(job.init) if job.init else "short")
    write_run(job.out, {"algorithm": job.algorithm, "params": job.params, "init": str(job.init),
                        "domains": list(job.domains), "profile": profile, "reward_url": job.reward_url,
                        "reward_target": job.reward_target, "limit": job.limit, "offset": job.offset, "seed": job.seed})  # fmt: skip
    ws = Workspace(job.bench_workspace or job.cfg.workspace)
    instances = []
    for domain in job.domains:
        train, _ = split_train_val(load_instances(ws, [domain], "train"))
        instances += window(train, offset=job.offset, limit=job.limit)
    exemplars = open_for_planner(job.init, job.cfg.embedder) if job.init else None
    shots = exemplar_shots(exemplars[0] if exemplars else None, exemplars[1] if exemplars else 0, instances)
    rows = [rl_row(i, profile, s) for i, s in zip(instances, shots, strict=True)]
    tok = run_tokenizer(job.out, job.init, list(chat_texts(r["prompt"] for r in rows)),
                        [i.program for i in instances], vocab_size=job.vocab_size,
                        max_token_chars=job.max_token_chars, split=job.split)  # fmt: skip
    model = (
        load_model(job.init)
        if job.init is not None
        else build_model(size_named(job.size), tok, seed=job.seed)
    )
    p = job.params
    args = GRPOConfig(
        **common_args(job),
        loss_type=p.loss_type,
        epsilon=p.epsilon,
        epsilon_high=p.epsilon_high,
        beta=p.beta,
        num_generations=p.num_generations,
        per_device_train_batch_size=p.prompts_per_step * p.num_generations,
        gradient_accumulation_steps=1,
        learning_rate=p.learning_rate,
        max_completion_length=p.max_completion_length,
        temperature=p.temperature,
        num_iterations=p.num_iterations,
        max_steps=p.max_steps,
        logging_steps=p.logging_steps,
        save_strategy="steps",
        save_steps=p.save_steps,
        save_total_limit=p.save_total_limit,
        remove_unused_columns=False,
        use_vllm=False,
        log_completions=False,
    )
    kept: set[str] | None = None
    samples: list[list[str]] | None = None
    key: dict[str, Any] = {}
    t0 = time.perf_counter()
    if p.filter_prompts:
        # Sampled before the reward opens the workspace: vLLM's engine core starts its own process.
        if job.init is None:
            raise TrainError(
                "--filter-prompts samples the initial model: give --init RUN/final", code="train_filter"
            )
        key = filter_key(job.init, rows, samples=p.num_generations, temperature=p.temperature,
                         max_tokens=p.max_completion_length, target=job.reward_target, on=p.filter_on,
                         execution_credit=p.execution_credit)  # fmt: skip
        kept = saved_filter(job.out, key)
        if kept is None:
            samples = sample(job.init, [r["prompt"] for r in rows], n=p.num_generations, temperature=p.temperature,
                             max_tokens=p.max_completion_length)  # fmt: skip
    scorer = None
    if job.reward_url:
        score = remote(job.reward_url)
    else:
        from rl.reward import RewardScorer

        scorer = RewardScorer.open(
            job.cfg, job.domains, reward_config(job.reward_target, p.execution_credit), tokenizer=tok
        )
        score = in_process(scorer)
    reward = LayeredReward(score, job.reward_target, p.execution_credit)
    try:
        if samples is not None:
            picked, stats = filter_rows(
                rows, samples, reward.layers, temperature=p.temperature, on=p.filter_on
            )
            stats = dataclasses.replace(stats, seconds=round(time.perf_counter() - t0, 1))
            record_filter(job.out, key, picked, stats)
            rows = picked
        elif kept is not None:
            rows = recorded_rows(rows, kept, job.out, p.filter_on)
        if p.filter_prompts and len(rows) < p.prompts_per_step:
            raise TrainError(f"the prompt filter kept {len(rows)} prompts, fewer than one step's "
                             f"{p.prompts_per_step}: sample more (--limit) or train without --filter-prompts",
                             code="train_filter")  # fmt: skip
        funcs: list[Any] = list(reward.funcs())
        trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args,
                              train_dataset=to_dataset(rows), processing_class=tok)  # fmt: skip
        _, resume, wall = logs.train_resumably(trainer, job.out)
    finally:
        if scorer is not None:
            scorer.close()
    final = job.out / FINAL
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    extra: dict[str, Any] = {}
    if exemplars is not None and job.init is not None:  # the same exemplars as the model it started from
        exemplars[0].save(final)
        extra["exemplars"] = read_card(job.init)["exemplars"]
    extra.update(carry_familiarity(job.init, final))
    write_card(final, profile=profile, domains=job.domains, algorithm=job.algorithm,
               init=str(job.init) if job.init else None, reward_target=job.reward_target,
               execution_credit=p.execution_credit, **extra)  # fmt: skip
    records = logs.read_metrics(job.out)
    last = [r for r in records if "reward" in r][-10:]
    summary: dict[str, Any] = to_jsonable({
        "algorithm": job.algorithm,
        "out": str(final),
        "steps": int(trainer.state.global_step),
        "resumed_from": str(resume) if resume else None,
        "parameters": parameter_count(trainer.model),
        "prompts": len(rows),
        "wall_s": round(wall, 1),
        **trained_in(trainer.args),
        "s_per_step": round(wall / max(1, trainer.state.global_step - (int(resume.name.split("-")[1]) if resume else 0)), 2),
        "reward_last10": round(sum(r["reward"] for r in last) / len(last), 4) if last else None,
    })  # fmt: skip
    return summary
