"""What every local training run shares: its directory, its tokenizer, the planner card, TRL's common options.

A run directory holds ``tokenizer/``, TRL checkpoints (``checkpoint-N``), ``metrics.jsonl``, TensorBoard
events under ``runs/``, ``run.json`` (what was asked) and, when training ends, ``final/``: the model and
tokenizer with ``planner.json``, the card that tells evaluation and serving which prompt profile the
model was trained with (so the prompt is the same at training, evaluation and serving time).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from indexing.workspace import atomic_write_json
from rl.errors import TrainError
from rl.prompt import CARD, Profile
from rl.train.tokenizer import Split, check_round_trip, load_tokenizer, train_tokenizer

FINAL = "final"
TOKENIZER = "tokenizer"
Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AMX tiles or AVX512-BF16), as PyTorch's CPU kernels see it.
    Elsewhere (AVX2 and older) PyTorch emulates bfloat16 arithmetic in fp32 code, far slower than fp32 itself."""
    import torch

    checks = (
        getattr(torch.cpu, "_is_amx_tile_supported", None),
        getattr(torch.cpu, "_is_avx512_bf16_supported", None),
    )
    return any(check is not None and bool(check()) for check in checks)


def uses_bf16(precision: Precision) -> bool:
    """Whether a run of ``precision`` trains in bf16 mixed precision: ``bf16`` always, ``fp32`` never, ``auto``
    where the CPU computes bf16 natively (:func:`native_bf16`). TRL's configs turn bf16 on by default, which
    is right on a GPU; on an AVX2 CPU every matrix product is emulated, and the demo's SFT step took 3.6 s
    where fp32 takes 0.7 s (``bench/sft_recipe.py --precision fp32 bf16``; README, "Training the planner")."""
    if precision not in PRECISIONS:
        raise TrainError(
            f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}", code="train_config"
        )
    return precision == "bf16" or (precision == "auto" and native_bf16())


def report_to() -> list[str]:
    """TensorBoard when it is installed; the JSONL log is always written."""
    return ["tensorboard"] if find_spec("tensorboard") is not None else []


def trained_in(args: Any) -> dict[str, Any]:
    """How a trainer's arguments (``TrainingArguments`` or a TRL config) train, for a run's summary: the
    precision (``bf16`` or ``fp32``) and whether layers recompute their forward in the backward."""
    return {
        "precision": "bf16" if args.bf16 else "fp32",
        "gradient_checkpointing": bool(args.gradient_checkpointing),
    }


class RunJob(Protocol):
    """What :func:`common_args` reads of a run (``SftJob``, ``RlJob``)."""

    @property
    def out(self) -> Path: ...
    @property
    def seed(self) -> int: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def gradient_checkpointing(self) -> bool: ...


def common_args(job: RunJob) -> dict[str, Any]:
    """Options every local run passes to TRL's and transformers' configs (CPU, no workers, TensorBoard,
    reproducible, the precision :func:`uses_bf16` gives, and gradient checkpointing only when the job asks:
    TRL's configs turn it on by default, transformers' leave it off)."""
    return {
        "bf16": uses_bf16(job.precision),
        "fp16": False,
        "gradient_checkpointing": job.gradient_checkpointing,
        "output_dir": str(job.out),
        "use_cpu": True,
        "seed": job.seed,
        "data_seed": job.seed,
        "report_to": report_to(),
        "dataloader_num_workers": 0,
        "save_only_model": False,
        "disable_tqdm": False,
    }


def threads() -> int:
    """Torch threads for a run: ``PRORE_TRAIN_THREADS``, else every core."""
    return int(os.environ.get("PRORE_TRAIN_THREADS", os.cpu_count() or 1))


def write_card(
    model_dir: Path, *, profile: Profile, domains: Iterable[str], algorithm: str, **extra: Any
) -> None:
    """Write the planner card beside a saved model."""
    atomic_write_json(
        model_dir / CARD, {"profile": profile, "domains": list(domains), "algorithm": algorithm, **extra}
    )


def write_run(out: Path, what: dict[str, Any]) -> None:
    """Record what a run was asked to do (``run.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "run.json", {k: asdict(v) if is_dataclass(v) and not isinstance(v, type) else v
                                         for k, v in what.items()})  # fmt: skip


def run_tokenizer(out: Path, init: Path | None, texts: list[str], programs: list[str], *, vocab_size: int,
                  max_token_chars: int, split: Split = "lines") -> Any:  # fmt: skip
    """The run's tokenizer: the init model's, the one a resumed run saved, or a new one trained on ``texts``.

    Every program is checked to round-trip exactly before any training step.
    """
    saved = out / TOKENIZER
    if init is not None:
        tok = load_tokenizer(init)
    elif saved.is_dir():
        tok = load_tokenizer(saved)
    else:
        tok = train_tokenizer(texts, vocab_size=vocab_size, max_token_chars=max_token_chars, split=split)
    check_round_trip(tok, programs)
    if not saved.is_dir():
        tok.save_pretrained(str(saved))
    return tok


def to_jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))
