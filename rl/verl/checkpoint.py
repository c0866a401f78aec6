"""A verl checkpoint as a planner: the actor's Hugging Face weights of one step, with the planner card.

verl's trainer saves each checkpoint step under ``<default_local_dir>/global_step_<N>/actor/`` and records the
newest in ``latest_checkpointed_iteration.txt``; with ``hf_model`` among
``actor_rollout_ref.actor.checkpoint.save_contents`` (as the CPU recipe sets it), ``actor/huggingface/`` holds the
full model and tokenizer in Hugging Face layout. :func:`import_planner` copies that folder into a model
directory and writes the planner card beside it: the card of the model the run started from (its prompt
profile and exemplar index, which the run's prompts were built with: ``prore train export --planner``, and
its familiarity gate, whose files are copied as a local RL run copies them), with the algorithm and the step. ``planner:PATH``, ``prore serve`` and the KServe transformer then read it like a
local run's ``final/``.

    prore train from-verl CHECKPOINT_DIR --init SFT_DIR --out DIR [--step N] [--algorithm grpo|dapo]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from indexing.workspace import atomic_write_json
from rl.errors import TrainError
from rl.train.familiarity import carry_familiarity

LATEST = "latest_checkpointed_iteration.txt"
"""verl's pointer to the newest complete checkpoint step (verl/trainer/ppo/ray_trainer.py)."""
HF_SUBDIR = Path("actor") / "huggingface"


def checkpoint_steps(ckpt_dir: Path) -> list[int]:
    """The steps of ``ckpt_dir``'s checkpoints that hold a Hugging Face model, oldest first."""
    found = []
    for child in ckpt_dir.glob("global_step_*") if ckpt_dir.is_dir() else ():
        step = child.name.removeprefix("global_step_")
        if step.isdigit() and (child / HF_SUBDIR / "config.json").is_file():
            found.append(int(step))
    return sorted(found)


def latest_step(ckpt_dir: Path) -> int:
    """The step verl recorded as its newest checkpoint; a :class:`TrainError` when there is none."""
    pointer = ckpt_dir / LATEST
    if not pointer.is_file():
        raise TrainError(f"{ckpt_dir}: no verl checkpoint ({LATEST} is missing)", code="verl_checkpoint")
    text = pointer.read_text().strip()
    if not text.isdigit():
        raise TrainError(f"{pointer}: expected a step number, got {text[:40]!r}", code="verl_checkpoint")
    return int(text)


def import_planner(ckpt_dir: Path, init: Path, out: Path, *, step: int | None = None,
                   algorithm: str = "grpo") -> Path:  # fmt: skip
    """Copy step ``step`` (default: the newest) of the verl checkpoint ``ckpt_dir`` to the model directory
    ``out`` with the card of ``init`` (the model the run started from); returns ``out``.

    ``out`` appears whole or not at all (written beside it, then renamed); an existing ``out`` is replaced.
    """
    from serving.prompt import CARD, read_card

    step = latest_step(ckpt_dir) if step is None else step
    hf = ckpt_dir / f"global_step_{step}" / HF_SUBDIR
    if not (hf / "config.json").is_file():
        have = checkpoint_steps(ckpt_dir)
        raise TrainError(f"{ckpt_dir}: step {step} has no Hugging Face model (save_contents needs hf_model); "
                         f"steps with one: {have or 'none'}", code="verl_checkpoint")  # fmt: skip
    if not (Path(init) / CARD).is_file():
        raise TrainError(f"{init}: no planner card ({CARD}); --init is the model the verl run started from",
                         code="verl_checkpoint")  # fmt: skip
    card = read_card(init)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(hf, staging, dirs_exist_ok=True)
        index = (card.get("exemplars") or {}).get("index")
        if index:  # the exemplar index the card names ships with the model
            shutil.copytree(Path(init) / index, staging / index)
        gate = carry_familiarity(Path(init), staging)  # and the familiarity gate's training requests
        atomic_write_json(staging / CARD, {**card, "algorithm": algorithm, "init": str(init), "verl_checkpoint":
                                           str(ckpt_dir), "verl_step": step, **gate})  # fmt: skip
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
