"""Supervised fine-tuning of the planner with TRL's ``SFTTrainer`` on (prompt, gold program) chats.

The loss covers the program only (prompt-completion rows). Validation loss is computed every
``eval_steps``; the checkpoint with the lowest one is loaded at the end and saved to ``final/`` (the
paper's rule). An interrupted run resumes from its latest complete checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from indexing.config import EmbedderConfig
from indexing.workspace import Workspace
from rl.datasets.store import Instance
from rl.errors import TrainError
from rl.prompt import Profile
from rl.train import logs
from rl.train.config import ENCODER_LR, SftParams, load_defaults
from rl.train.data import exemplar_shots, load_instances, sft_row, split_train_val, to_dataset, window
from rl.train.model import build_model, load_model, parameter_count, size_named
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
from rl.train.warm_start import InitEmbeddings, ties_embeddings, warm_embeddings
from serving.exemplars import ExemplarIndex


@dataclass(frozen=True)
class SftJob:
    """One SFT run."""

    workspace: Path
    domains: tuple[str, ...]
    out: Path
    params: SftParams = field(default_factory=lambda: load_defaults().sft)
    size: str = "s"
    profile: Profile = "short"
    vocab_size: int = 4096
    max_token_chars: int = 24
    split: Split = "lines"
    """The tokenizer's pre-split when the run trains one (no ``init``)."""
    init: Path | None = None
    """Start from this model directory (its tokenizer too) instead of random weights."""
    limit: int | None = None
    """Use at most this many training instances per domain (tests, quick demos)."""
    offset: int = 0
    """Skip this many training instances per domain first (the validation hold-out is unaffected)."""
    extra_rows: tuple[tuple[str, str, str], ...] = ()
    """More (domain, request, program) pairs to train on, e.g. programs repaired by verified mutation."""
    seed: int = 0
    precision: Precision = "auto"
    """``auto``, ``fp32`` or ``bf16`` (:func:`rl.train.run.uses_bf16`)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's forward in the backward instead of keeping its activations (memory for time)."""
    exemplars: int = 0
    """Exemplars per prompt (:mod:`serving.exemplars`), retrieved from an index of this run's training pairs
    that ships in ``final/exemplars``; 0: none."""
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    """How the exemplar index embeds requests."""
    recombine: int = 0
    """Recombined copies per training pair (:mod:`rl.train.recombine`): its search phrases swapped for corpus
    spans in the request and the program alike, which teaches copying the request's phrase; 0: none."""
    corpus_workspace: Path | None = None
    """Where the corpora the spans come from are (default: ``workspace``)."""
    max_minutes: float | None = None
    """Stop after this many minutes of training (equal-wall-clock ablations); None: at ``max_steps``/epochs."""
    init_embeddings: InitEmbeddings = "random"
    """How a new model's token embeddings start: ``random``, ``minilm`` (:mod:`rl.train.warm_start`: each token
    from MiniLM's WordPiece embeddings of its text, tied to the output layer) or ``minilm-untied`` (the same input
    rows, an untied output layer left at random). Ignored with ``init``."""
    encoder_trainable_layers: int = 0
    """``--arch minilm-seq2seq`` only: MiniLM's top layers trained with the decoder (:mod:`rl.train.seq2seq`);
    0 keeps the encoder frozen."""
    encoder_lr: float = ENCODER_LR
    """``--arch minilm-seq2seq`` only: the learning rate of MiniLM's trainable layers."""
    deepspeed: str | None = None
    """DeepSpeed ZeRO through accelerate: ``zero2``, ``zero3`` (rl/train/deepspeed) or a JSON config; ``None``
    trains without it. A run not started by a launcher is a world of one (on CPU, DeepSpeed's gloo backend)."""


def instances(job: SftJob) -> tuple[list[Instance], list[Instance]]:
    """The train and validation instances of ``job``, domain after domain."""
    ws = Workspace(job.workspace)
    train, val = [], []
    for domain in job.domains:
        t, v = split_train_val(load_instances(ws, [domain], "train"))
        train += window(t, offset=job.offset, limit=job.limit)
        val += v[: max(8, job.limit // 10)] if job.limit is not None else v
    return train, val


def exemplar_index(job: SftJob, train: Sequence[Instance]) -> ExemplarIndex | None:
    """The index of ``job``'s training pairs (train split, validation hold-out excluded), or None."""
    if job.exemplars <= 0:
        return None
    return ExemplarIndex.build(((i.domain, i.nl, i.program) for i in train), embedder=job.embedder)


def rows(
    job: SftJob, index: ExemplarIndex | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The train and validation rows of ``job``, each prompt with its exemplars from ``index``."""
    from rl.prompt import messages

    t, v = instances(job)
    train = [
        sft_row(i, job.profile, shots=s)
        for i, s in zip(t, exemplar_shots(index, job.exemplars, t), strict=True)
    ]
    val = [
        sft_row(i, job.profile, shots=s)
        for i, s in zip(v, exemplar_shots(index, job.exemplars, v), strict=True)
    ]
    from rl.train.recombine import recombined_rows

    for domain, nl, program in (
        *job.extra_rows,
        *recombined_rows(Workspace(job.corpus_workspace or job.workspace), t, job.recombine, seed=job.seed),
    ):
        shots = index.select(domain, [nl], k=job.exemplars)[0] if index is not None else []
        train.append({"prompt": messages(domain, nl, profile=job.profile, shots=shots),
                      "completion": [{"role": "assistant", "content": program}]})  # fmt: skip
    return train, val


def sft_trainer(
    job: SftJob, index: ExemplarIndex | None = None, **overrides: Any
) -> tuple[Any, Any, list[dict[str, Any]]]:
    """TRL's ``SFTTrainer`` for ``job``, its tokenizer and its training rows, prompts with exemplars from
    ``index`` (``overrides`` go over the ``SFTConfig``; ``bench/sft_recipe.py`` compares recipes through it)."""
    import torch
    from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

    torch.set_num_threads(threads())
    train_rows, val_rows = rows(job, index)
    chats = [r["prompt"] + r["completion"] for r in train_rows]
    programs = [r["completion"][0]["content"] for r in train_rows + val_rows]
    tok = run_tokenizer(job.out, job.init, list(chat_texts(chats)), programs, vocab_size=job.vocab_size,
                        max_token_chars=job.max_token_chars, split=job.split)  # fmt: skip
    if job.init is not None:
        model = load_model(job.init)
    else:
        size = replace(size_named(job.size), tie_embeddings=ties_embeddings(job.init_embeddings))
        model = build_model(size, tok, seed=job.seed)
        warm = warm_embeddings(model, tok, job.init_embeddings)
        if warm is not None:
            print(f"embeddings from {warm.source}: {warm.warmed} of {warm.tokens} tokens ({warm.projection})")
    p = job.params
    options: dict[str, Any] = {
        **common_args(job),
        "num_train_epochs": p.epochs,
        "max_steps": p.max_steps,
        "per_device_train_batch_size": p.batch_size,
        "per_device_eval_batch_size": p.batch_size,
        "learning_rate": p.learning_rate,
        "lr_scheduler_type": "cosine",
        "warmup_steps": p.warmup_ratio,  # below 1: a fraction of the steps
        "weight_decay": p.weight_decay,
        "max_length": p.max_length,
        "eval_strategy": "steps",
        "eval_steps": p.eval_steps,
        "save_strategy": "steps",
        "save_steps": p.eval_steps,
        "save_total_limit": p.save_total_limit,
        "load_best_model_at_end": True,
        "metric_for_best_model": "eval_loss",
        "greater_is_better": False,
        "logging_steps": p.logging_steps,
        "completion_only_loss": True,
        "packing": False,
        "train_sampling_strategy": "group_by_length" if p.group_by_length else "random",
        **_deepspeed_options(job.deepspeed),
        **overrides,
    }
    trainer = SFTTrainer(model=model, args=SFTConfig(**options), train_dataset=to_dataset(train_rows),
                         eval_dataset=to_dataset(val_rows), processing_class=tok)  # fmt: skip
    kept = len(trainer.train_dataset)  # type: ignore[arg-type]  # a datasets.Dataset here, never iterable
    if kept < len(train_rows):  # TRL drops a chat whose prompt alone fills max_length, silently
        raise TrainError(f"{len(train_rows) - kept} of {len(train_rows)} training chats have no program token "
                         f"within max_length {options['max_length']}; raise sft.max_length or use a shorter "
                         "prompt profile", code="train_max_length")  # fmt: skip
    return trainer, tok, train_rows


def _deepspeed_options(name: str | None) -> dict[str, Any]:
    """The ``SFTConfig`` options of a DeepSpeed run (none without one); a world of one where no launcher ran."""
    if name is None:
        return {}
    from rl.train.deepspeed import resolve, single_process_env, skip_shared_memory_comm

    os.environ.update(single_process_env())
    skip_shared_memory_comm()
    return {"deepspeed": str(resolve(name))}


def train_to_final(trainer: Any, tok: Any, job: SftJob) -> tuple[Any, Path | None, float, Path]:
    """Run ``trainer`` (with the run's logs and wall-clock budget; from the latest checkpoint of an interrupted
    run) and save its best model and ``tok`` to ``out/final``: the train result, the checkpoint resumed from,
    the seconds of training and the final folder."""
    result, resume, wall = logs.train_resumably(
        trainer, job.out, job.max_minutes * 60 if job.max_minutes is not None else None
    )
    final = job.out / FINAL
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    return result, resume, wall, final


def run_sft(job: SftJob) -> dict[str, Any]:
    """Train, keep the best checkpoint in ``out/final``, and return a summary (steps, losses, time, tokens/s)."""
    write_run(job.out, {"algorithm": "sft", "job": job})
    t0 = time.perf_counter()
    index = exemplar_index(job, instances(job)[0])
    index_s = time.perf_counter() - t0
    trainer, tok, train_rows = sft_trainer(job, index)
    p = job.params
    result, resume, wall, final = train_to_final(trainer, tok, job)
    best = trainer.state.best_metric
    extra: dict[str, Any] = {}
    if job.init is None:
        extra["init_embeddings"] = job.init_embeddings
    if job.deepspeed is not None:
        from rl.train.deepspeed import resolve, stage

        extra["deepspeed"] = {"config": job.deepspeed, "zero_stage": stage(resolve(job.deepspeed))}
    if index is not None:
        index.save(final)
        extra["exemplars"] = index.card(job.exemplars)
        index.close()
    write_card(final, profile=job.profile, domains=job.domains, algorithm="sft", best_eval_loss=best,
               best_checkpoint=trainer.state.best_model_checkpoint, **extra)  # fmt: skip
    tokens = _train_tokens(tok, train_rows)
    steps = int(trainer.state.global_step)
    summary: dict[str, Any] = to_jsonable({
        "algorithm": "sft",
        "out": str(final),
        "steps": steps,
        "resumed_from": str(resume) if resume else None,
        "train_rows": len(train_rows),
        "val_rows": len(trainer.eval_dataset),
        "parameters": parameter_count(trainer.model),
        "best_eval_loss": best,
        "train_loss": result.training_loss,
        "wall_s": round(wall, 1),
        **trained_in(trainer.args),
        "exemplar_index_s": round(index_s, 1) if index is not None else None,
        "mean_tokens_per_row": round(tokens / max(1, len(train_rows)), 1),
        "tokens_per_s": round(tokens / max(1, len(train_rows)) * p.batch_size * steps / max(wall, 1e-9), 1),
    })  # fmt: skip
    return summary


def _train_tokens(tok: Any, train_rows: Sequence[dict[str, Any]]) -> int:
    sample = train_rows[:: max(1, len(train_rows) // 200)]
    n = sum(
        len(
            tok(
                tok.apply_chat_template(r["prompt"] + r["completion"], tokenize=False),
                add_special_tokens=False,
            )["input_ids"]
        )
        for r in sample
    )
    return int(n * len(train_rows) / max(1, len(sample)))
