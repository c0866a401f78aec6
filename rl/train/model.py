"""A small Qwen3-architecture causal LM built from a config (no pretrained weights can be downloaded here).

The same code path takes a real Qwen3 checkpoint directory: :func:`load_model` reads any saved
``Qwen3ForCausalLM``. Sizes were chosen from measured throughput on 2 CPU cores (README, "Training the
planner"); ``s`` is the default.

>>> SIZES["s"].hidden_size, SIZES["s"].num_layers
(256, 4)
>>> round(approx_parameters(SIZES["s"], vocab_size=4096) / 1e6, 1)
5.0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl.errors import TrainError


@dataclass(frozen=True)
class ModelSize:
    """The shape of a Qwen3 decoder. ``head_dim`` * ``num_heads`` need not equal ``hidden_size`` (Qwen3's own rule)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int = 8192
    """Longest context (rotary positions cost nothing to allow): room for the full prompt with few-shot exemplars."""
    tie_embeddings: bool = True
    """Tied input and output embeddings (fewer parameters at a small vocabulary)."""


SIZES: dict[str, ModelSize] = {
    "xs": ModelSize(
        hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32, intermediate_size=128
    ),
    "t": ModelSize(
        hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=512
    ),
    "s": ModelSize(
        hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=1024
    ),
    "m": ModelSize(
        hidden_size=384, num_layers=6, num_heads=6, num_kv_heads=2, head_dim=64, intermediate_size=1536
    ),
}
"""``xs``: tests (about 0.3M parameters); ``t``: about 1.5M, the most validation loss per minute of training on
2 cores (README, "What `make demo` does"); ``s``: the local default (about 5M); ``m``: about 15M, for a quiet
machine."""


def size_named(name: str) -> ModelSize:
    try:
        return SIZES[name]
    except KeyError:
        raise TrainError(
            f"unknown model size {name!r}; choose one of {', '.join(SIZES)}", code="train_model"
        ) from None


def approx_parameters(size: ModelSize, *, vocab_size: int) -> int:
    """Parameters of a model of ``size`` (embeddings counted once when tied)."""
    h, d = size.hidden_size, size.head_dim
    attn = h * d * (size.num_heads * 2 + size.num_kv_heads * 2) + 2 * d
    mlp = 3 * h * size.intermediate_size
    layer = attn + mlp + 2 * h
    emb = vocab_size * h * (1 if size.tie_embeddings else 2)
    return size.num_layers * layer + emb + h


def qwen3_config(size: ModelSize, tokenizer: Any) -> Any:
    """A ``Qwen3Config`` of ``size`` whose vocabulary and special ids are ``tokenizer``'s."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads,
        head_dim=size.head_dim,
        intermediate_size=size.intermediate_size,
        max_position_embeddings=size.max_positions,
        tie_word_embeddings=size.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )


def build_model(size: ModelSize, tokenizer: Any, *, seed: int = 0) -> Any:
    """A randomly initialized ``Qwen3ForCausalLM`` of ``size`` (seeded, so a run is reproducible)."""
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(qwen3_config(size, tokenizer))  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def load_model(path: str | Path) -> Any:
    """A saved causal LM (a checkpoint of this trainer, or a real Qwen3 directory)."""
    from transformers import AutoModelForCausalLM

    if not Path(path).is_dir():
        raise TrainError(f"no model directory at {path}", code="train_model")
    return AutoModelForCausalLM.from_pretrained(str(path))


def parameter_count(model: Any) -> int:
    """Distinct parameters of ``model`` (tied weights counted once; under DeepSpeed ZeRO-3, whose parameters
    are partitioned, their full sizes)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[id(p)] = int(getattr(p, "ds_numel", p.numel()))
    return sum(seen.values())
