"""DeepSpeed ZeRO configurations of the SFT stage (TRL's ``SFTTrainer`` through accelerate's DeepSpeed plugin).

``zero2.json`` shards optimizer states and gradients across the data-parallel ranks; ``zero3.json`` shards
the parameters too, and gathers them into one 16-bit copy when the model is saved, so a saved checkpoint
loads as a planner (``planner:PATH``) like any other. Sizes, batch sizes, clipping and precision are
``auto``: the Hugging Face Trainer fills them from the ``SFTConfig``, so a recipe names them once.

Which to use for a real checkpoint, per GPU of 80 GB: Qwen3-4B trains with ZeRO-2 on one node of 8 GPUs;
Qwen3-8B needs ZeRO-3 (its bf16 weights, gradients and fp32 Adam states are about 16 bytes per parameter,
128 GB in all, sharded 8 ways). verl's own SFT trainer (``prore train launch sft``) trains with FSDP instead:
verl 0.9.1 deprecated its DeepSpeed backend.

>>> sorted(p.name for p in CONFIGS.values())
['zero2.json', 'zero3.json']
>>> resolve("zero3").name
'zero3.json'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from indexing.stores.server import free_port
from rl.errors import TrainError

HERE = Path(__file__).resolve().parent
CONFIGS = {"zero2": HERE / "zero2.json", "zero3": HERE / "zero3.json"}
"""The configurations that ship with the recipes, by name."""


def resolve(name_or_path: str) -> Path:
    """A shipped configuration by name (``zero2``, ``zero3``) or a JSON file of one's own.

    >>> resolve("zero4")
    Traceback (most recent call last):
    ...
    rl.errors.TrainError: DeepSpeed config 'zero4' is neither zero2, zero3 nor a JSON file
    """
    if name_or_path in CONFIGS:
        return CONFIGS[name_or_path]
    path = Path(name_or_path)
    if path.suffix != ".json" or not path.is_file():
        raise TrainError(f"DeepSpeed config {name_or_path!r} is neither zero2, zero3 nor a JSON file",
                         code="train_deepspeed")  # fmt: skip
    try:
        json.loads(path.read_text())
    except ValueError as exc:
        raise TrainError(f"DeepSpeed config {path} is not JSON: {exc}", code="train_deepspeed") from None
    return path


def stage(path: Path) -> int:
    """The ZeRO stage a configuration asks for."""
    config: dict[str, Any] = json.loads(path.read_text())
    return int(config.get("zero_optimization", {}).get("stage", 0))


def single_process_env() -> dict[str, str]:
    """What a run not started by a launcher (``accelerate launch``, ``deepspeed``, ``torchrun``) needs to be a
    world of one: rank variables and a free rendezvous port, and DeepSpeed's CPU accelerator (gloo) where no
    GPU is visible. Variables already set are kept; returns only those it adds."""
    import torch

    added: dict[str, str] = {}
    if "RANK" not in os.environ:
        port = free_port()
        added.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available():
        added["DS_ACCELERATOR"] = "cpu"
    return added


SHM_COMM = "deepspeed_shm_comm"
"""DeepSpeed's shared-memory all-reduce for ranks on one CPU host, compiled on first use of its CPU backend."""


def skip_shared_memory_comm() -> bool:
    """In a world of one, tell DeepSpeed its shared-memory collective op is unavailable; returns whether it did.

    DeepSpeed's torch backend compiles that op (C++, with ninja) whenever it initializes on the CPU
    accelerator, for every new virtualenv or path: about 45 s on 2 cores, for a single rank that has no peer
    to reduce with. Without it, DeepSpeed uses gloo, as it does wherever the op cannot be built. A world of
    several ranks keeps it."""
    if os.environ.get("WORLD_SIZE", "1") != "1":
        return False
    import deepspeed.ops

    # deepspeed.ops probes its ops once and caches the dict in the module; build_shm_op() reads it there.
    deepspeed.ops.__compatible_ops__[SHM_COMM] = False
    return True
