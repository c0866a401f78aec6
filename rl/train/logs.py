"""Training logs and checkpoints: one JSONL record per logged step, progress with ETA, resuming.

``metrics.jsonl`` in a run directory holds every ``Trainer`` log (loss, learning rate, and for GRPO/DAPO
each reward term's mean, the execution rate, completion length, KL and clip fractions) with its
``step``. TensorBoard event files are written beside it (``runs/``) when tensorboard is installed.

verl's runs log through its file logger (``trainer.logger`` with ``file``, ``VERL_FILE_LOGGER_PATH``), one
``{"step": N, "data": {...}}`` record per step; :func:`read_metrics` reads a ``metrics.jsonl`` of either kind and
gives verl's records the local names of the quantities both trainers log (:data:`VERL_NAMES`), so
``prore train plot`` draws a verl run next to a local one.

A run resumes from its latest *complete* checkpoint (one whose ``trainer_state.json`` was written); the
records logged after that checkpoint are dropped first, so a resumed run logs every step exactly once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

PROGRESS_KEYS = ("loss", "eval_loss", "reward", "rewards/accuracy/mean", "rewards/execution/mean")
"""Log entries shown beside the progress bar, when present."""


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of ``run_dir`` as (step, path), oldest first."""
    found = []
    for child in run_dir.iterdir() if run_dir.is_dir() else ():
        m = _CHECKPOINT.match(child.name)
        if m and (child / STATE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


VERL_NAMES = {
    "critic/score/mean": "reward",
    "actor/pg_loss": "loss",
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "response_length/mean": "completions/mean_length",
    "actor/grad_norm": "grad_norm",
}
"""verl's metric names (verl/trainer/ppo/metric_utils.py, the actor's update) and the local trainer's names of
the same quantities: the batch's mean reward, the policy loss, the KL term, the clipped share, the response
length and the gradient norm."""


def from_verl(record: dict[str, Any]) -> dict[str, Any]:
    """A record of verl's file logger (``{"step", "data"}``) flattened, each of :data:`VERL_NAMES` also under
    its local name; any other record unchanged.

    >>> from_verl({"step": 3, "data": {"critic/score/mean": 2.5, "actor/pg_loss": -0.1}})
    {'step': 3, 'critic/score/mean': 2.5, 'actor/pg_loss': -0.1, 'reward': 2.5, 'loss': -0.1}
    """
    data = record.get("data")
    if not isinstance(data, dict):
        return record
    flat = {"step": record["step"], **data}
    flat.update({local: data[name] for name, local in VERL_NAMES.items() if name in data})
    return flat


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's JSONL records, in order (verl's records flattened by :func:`from_verl`)."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    return [from_verl(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def truncate_metrics(run_dir: Path, step: int) -> int:
    """Drop records logged after ``step`` (they will be logged again on resume); returns how many were kept."""
    kept = [r for r in read_metrics(run_dir) if int(r.get("step", 0)) <= step]
    path = run_dir / METRICS_FILE
    if path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(path)
    return len(kept)


def resume_point(run_dir: Path) -> Path | None:
    """The checkpoint to resume from (latest complete), with the metrics file cut back to its step."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None:
        state = json.loads((ckpt / STATE_FILE).read_text())
        truncate_metrics(run_dir, int(state["global_step"]))
    return ckpt


def best_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint the trainer recorded as best (lowest validation loss), if any."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    best = json.loads((ckpt / STATE_FILE).read_text()).get("best_model_checkpoint")
    return Path(best) if best else None


def callbacks(run_dir: Path) -> list[Any]:
    """The trainer callbacks of a run: the JSONL writer and a progress bar showing the current metrics."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import ProgressCallback

    class JsonlMetrics(TrainerCallback):  # type: ignore[misc]
        """Appends every log to ``metrics.jsonl`` with its step, epoch and wall-clock time."""

        def __init__(self) -> None:
            self.t0 = time.time()

        def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
                   **kwargs: Any) -> None:  # fmt: skip
            if not logs or not state.is_world_process_zero:
                return
            record = {
                "step": state.global_step,
                "epoch": state.epoch,
                "time": round(time.time() - self.t0, 3),
            }
            record.update({k: v for k, v in logs.items() if isinstance(v, int | float | str)})
            with (run_dir / METRICS_FILE).open("a") as f:
                f.write(json.dumps(record) + "\n")

    class MetricsProgress(ProgressCallback):  # type: ignore[misc]
        """tqdm's bar (steps, ETA) with the latest loss and reward beside it instead of printed dicts."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
                   **kwargs: Any) -> None:  # fmt: skip
            bar = getattr(self, "training_bar", None)
            if bar is not None and logs:
                shown = {
                    k.split("/")[-2] if "/" in k else k: round(float(logs[k]), 4)
                    for k in PROGRESS_KEYS
                    if k in logs
                }
                if shown:
                    bar.set_postfix(shown, refresh=False)

    return [JsonlMetrics(), MetricsProgress()]


def wall_clock_budget(seconds: float) -> Any:
    """A callback that ends training once ``seconds`` of training have passed, after a last evaluation and
    checkpoint, so ablations can run at equal wall clock (``--max-minutes``); the best checkpoint is kept as usual.
    The learning-rate schedule still follows ``max_steps``: set it near the steps the budget allows."""
    from transformers import TrainerCallback

    class WallClockBudget(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.t0: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.t0 is not None and time.perf_counter() - self.t0 >= seconds:
                control.should_evaluate = args.eval_strategy != "no"
                control.should_save = True
                control.should_training_stop = True

    return WallClockBudget()


def install_callbacks(trainer: Any, run_dir: Path, max_seconds: float | None = None) -> None:
    """Replace the trainer's printing progress callback by :func:`callbacks`; with ``max_seconds``, also
    :func:`wall_clock_budget`."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    for cb in callbacks(run_dir):
        trainer.add_callback(cb)
    if max_seconds is not None:
        if max_seconds <= 0:
            from rl.errors import TrainError

            raise TrainError(f"--max-minutes must be above 0, got {max_seconds / 60:g}", code="train_budget")
        trainer.add_callback(wall_clock_budget(max_seconds))


def iter_steps(records: list[dict[str, Any]], key: str) -> Iterator[tuple[int, float]]:
    """(step, value) of every record that has ``key``."""
    for r in records:
        if key in r and isinstance(r[key], int | float):
            yield int(r["step"]), float(r[key])


def train_resumably(
    trainer: Any, out: Path, max_seconds: float | None = None
) -> tuple[Any, Path | None, float]:
    """Run ``trainer`` with the run's logs (:func:`install_callbacks`), from the latest checkpoint of an interrupted
    run in ``out`` (:func:`resume_point`): the train result, the checkpoint resumed from and the seconds it took."""
    install_callbacks(trainer, out, max_seconds)
    resume = resume_point(out)
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return result, resume, time.perf_counter() - t0
