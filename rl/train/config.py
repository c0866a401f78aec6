"""Typed defaults of the local trainer, read from ``defaults.yaml`` beside this module.

The YAML file is the one place the recipe's numbers live (each key cites the paper and says where the
local profile departs from it); these frozen dataclasses give them types, and the CLI puts its flags over them.

>>> d = load_defaults()
>>> d.rl("grpo").epsilon, d.rl("grpo").epsilon_high, d.rl("dapo").epsilon, d.rl("dapo").epsilon_high
(0.2, 0.2, 0.1, 0.28)
>>> d.rl("dapo").loss_type, d.rl("grpo").beta, d.rl("grpo").num_generations
('dapo', 0.001, 4)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from rl.errors import TrainError
from rl.prompt import PROFILES, Profile
from rl.reward.config import RewardConfig
from rl.train.run import PRECISIONS, Precision
from rl.train.tokenizer import SPLITS, Split
from rl.train.warm_start import INIT_EMBEDDINGS, InitEmbeddings

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
LossType = Literal["grpo", "dapo"]
LOSS_TYPES: tuple[LossType, ...] = get_args(LossType)
FilterOn = Literal["reward", "accuracy"]
FILTER_ON: tuple[FilterOn, ...] = get_args(FilterOn)
RlAlgorithm = Literal["grpo", "dapo"]


ENCODER_LR = 5e-5
"""Learning rate of MiniLM's trainable layers: a BERT fine-tuning rate (Devlin et al., 2019: 2e-5 to 5e-5). The
decoder, trained from random weights, takes the recipe's far larger one; at that rate the pretrained layers are
wrecked (measured in the README: ecommerce test Hit@1 0.138 with the top two layers at 1e-3)."""


@dataclass(frozen=True)
class SftParams:
    """Supervised fine-tuning on (prompt, gold program) chats; the checkpoint with the lowest validation loss wins.

    Its values come from ``defaults.yaml`` (:func:`load_defaults`), the one place the recipe's numbers live."""

    epochs: float
    """Passes over the training chats."""
    learning_rate: float
    """Peak learning rate."""
    batch_size: int
    """Chats per optimizer step."""
    warmup_ratio: float
    """Share of the steps the learning rate warms up over."""
    weight_decay: float
    """AdamW's weight decay."""
    max_length: int
    """Longest chat in tokens; longer ones are cut."""
    eval_steps: int
    """Validate and checkpoint every this many steps (the checkpoint with the lowest validation loss is kept)."""
    save_total_limit: int
    """Checkpoints kept: the best and the latest (for resuming)."""
    logging_steps: int
    """Log every this many steps."""
    max_steps: int
    """Stop after this many optimizer steps (-1: run ``epochs``)."""
    group_by_length: bool
    """Batch chats of similar length together (transformers' ``LengthGroupedSampler``), so little of a step is padding."""


@dataclass(frozen=True)
class RlParams:
    """GRPO or DAPO through TRL's ``GRPOTrainer`` (``loss_type``, ``epsilon``/``epsilon_high``, ``beta``); its
    values come from ``defaults.yaml``."""

    loss_type: LossType
    """TRL's loss: ``grpo`` (sequence-level normalization) or ``dapo`` (token-level aggregation)."""
    num_generations: int
    """Completions per prompt, G."""
    prompts_per_step: int
    """Prompts per optimizer step (each with its G completions)."""
    learning_rate: float
    """Peak learning rate."""
    beta: float
    """KL coefficient against the initial model (0 loads no reference model)."""
    epsilon: float
    """Lower clip of the policy ratio."""
    epsilon_high: float
    """Upper clip of the policy ratio (above ``epsilon``: DAPO's clip-higher)."""
    max_completion_length: int
    """Tokens per completion."""
    temperature: float
    """Sampling temperature of the completions."""
    num_iterations: int
    """TRL's ``num_iterations`` (mu): optimizer steps on each generation batch. With 1 the policy ratio is 1
    and clipping never acts; above 1, a batch is generated once every mu steps and reused."""
    filter_prompts: bool
    """Train only on prompts whose G samples from the initial model earn differing rewards (DAPO's dynamic
    sampling, once before training: :mod:`rl.train.prompt_filter`). A group of equal rewards has zero
    advantage and teaches nothing."""
    filter_on: FilterOn
    """What must differ within a kept group: ``reward`` (any layer, so groups that differ only in whether
    their wrong programs execute are kept) or ``accuracy`` (some samples earn the accuracy layer and some
    do not: DAPO's own rule)."""
    execution_credit: float
    """The share of the execution layer a program that runs and misses earns (``RewardConfig.execution_credit``):
    1 is the paper's reward; 0 pays running only together with accuracy."""
    max_steps: int
    """Stop after this many optimizer steps."""
    logging_steps: int
    """Log every this many steps."""
    save_steps: int
    """Checkpoint every this many steps."""
    save_total_limit: int
    """Checkpoints kept."""

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise TrainError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}",
                             code="train_config")  # fmt: skip
        if self.filter_on not in FILTER_ON:
            raise TrainError(f"filter_on must be one of {', '.join(FILTER_ON)}, got {self.filter_on!r}",
                             code="train_config")  # fmt: skip
        RewardConfig(execution_credit=self.execution_credit)  # the reward's own check of the credit's range
        if self.num_iterations < 1:
            raise TrainError(
                f"num_iterations must be at least 1, got {self.num_iterations}", code="train_config"
            )
        if self.num_generations < 2:
            raise TrainError("GRPO needs at least 2 generations per prompt (group-relative advantages)",
                             code="train_config")  # fmt: skip
        if self.beta < 0 or self.epsilon <= 0 or self.epsilon_high < self.epsilon:
            raise TrainError(
                f"need beta >= 0 and 0 < epsilon <= epsilon_high, got beta={self.beta}, "
                f"epsilon={self.epsilon}, epsilon_high={self.epsilon_high}", code="train_config",
            )  # fmt: skip


@dataclass(frozen=True)
class Defaults:
    """The whole defaults file."""

    model_size: str
    """Model size when starting from random weights (:data:`rl.train.model.SIZES`)."""
    init_embeddings: InitEmbeddings
    """How a new model's token embeddings start: ``random``, ``minilm`` (each token from MiniLM's WordPiece
    embeddings of its text, :mod:`rl.train.warm_start`), or ``minilm-untied`` (those input rows, and an output
    layer of its own that starts at random)."""
    vocab_size: int
    """Vocabulary of a new tokenizer (byte-level BPE trained on the project's prompts and programs)."""
    max_token_chars: int
    """Longest token of a new tokenizer, in characters."""
    split: Split
    """Pre-split of a new tokenizer: ``words`` or ``lines`` (ignored with an initial model, whose tokenizer is
    kept)."""
    profile: Profile
    """Prompt profile (:mod:`rl.prompt`) of a supervised run; RL takes its initial model's."""
    exemplars: int
    """Exemplars per prompt, retrieved from an index of the run's training pairs that ships with the model
    (:mod:`serving.exemplars`); 0: none."""
    precision: Precision
    """Training precision: ``auto`` (bf16 mixed precision where the CPU computes bf16 natively, AMX or
    AVX512-BF16, else fp32), ``fp32`` or ``bf16`` (:func:`rl.train.run.uses_bf16`)."""
    gradient_checkpointing: bool
    """Recompute each layer's forward in the backward instead of keeping its activations: less memory, one more
    forward per step. TRL turns it on by default; the local models need no such saving."""
    recombine: int
    """Recombined copies of each training pair whose search phrases the request says verbatim, swapped for corpus
    word spans in request and program alike (:mod:`rl.train.recombine`), which teaches copying the request's
    phrase; 0 to 4."""
    sft: SftParams
    grpo: RlParams
    dapo: RlParams

    def rl(self, algorithm: str) -> RlParams:
        """The parameters of ``grpo`` or ``dapo``."""
        if algorithm == "grpo":
            return self.grpo
        if algorithm == "dapo":
            return self.dapo
        raise TrainError(f"unknown RL algorithm {algorithm!r}; choose grpo or dapo", code="train_recipe")


def _build(cls: type[Any], values: Mapping[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise TrainError(f"unknown key(s) in {where}: {', '.join(unknown)}", code="train_config")
    missing = sorted(names - set(values))
    if missing:
        raise TrainError(f"missing key(s) in {where}: {', '.join(missing)}", code="train_config")
    return cls(**values)


def replace(params: Any, **changes: Any) -> Any:
    """``params`` with the non-None ``changes`` applied (flags over the defaults file)."""
    return dataclasses.replace(params, **{k: v for k, v in changes.items() if v is not None})


def _count(value: Any, key: str, top: int) -> int:
    """``value`` of the defaults file's ``key``, an integer from 0 to ``top``, or a one-line error."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
        raise TrainError(f"{key} must be an integer from 0 to {top}, got {value!r}", code="train_config")
    return value


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> Any:
    """``value`` of the defaults file's ``key``, one of ``choices``, or a one-line error."""
    if value not in choices:
        raise TrainError(f"{key} must be one of {', '.join(choices)}, got {value!r}", code="train_config")
    return value


def _flag(value: Any, key: str) -> bool:
    """``value`` of the defaults file's ``key``, true or false, or a one-line error."""
    if not isinstance(value, bool):
        raise TrainError(f"{key} must be true or false, got {value!r}", code="train_config")
    return value


@cache
def load_defaults(path: Path = DEFAULTS_FILE) -> Defaults:
    """The defaults file as typed parameters; DAPO is GRPO's section with DAPO's keys over it."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    grpo = _build(RlParams, data["grpo"], "grpo")
    dapo = _build(RlParams, {**data["grpo"], **data["dapo"]}, "dapo")
    model = data["model"]
    return Defaults(
        model_size=str(model["size"]),
        init_embeddings=_choice(
            model.get("init_embeddings", "random"), "model.init_embeddings", INIT_EMBEDDINGS
        ),
        precision=_choice(model.get("precision", "auto"), "model.precision", PRECISIONS),
        gradient_checkpointing=_flag(
            model.get("gradient_checkpointing", False), "model.gradient_checkpointing"
        ),
        vocab_size=int(data["tokenizer"]["vocab_size"]),
        max_token_chars=int(data["tokenizer"]["max_token_chars"]),
        split=_choice(data["tokenizer"]["split"], "tokenizer.split", SPLITS),
        profile=_choice(data["prompt"]["profile"], "prompt.profile", PROFILES),
        exemplars=_count(data["prompt"].get("exemplars", 0), "prompt.exemplars", 8),
        recombine=_count(data["sft"].pop("recombine", 0), "sft.recombine", 4),
        sft=_build(SftParams, data["sft"], "sft"),
        grpo=grpo,
        dapo=dapo,
    )
