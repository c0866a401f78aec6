"""SFT throughput of the local trainer's recipe candidates, side by side in one run, through TRL's own trainer.

Each candidate is a prompt profile (``short`` or ``compact``), a tokenizer pre-split (``lines`` or ``words``)
and a batching rule (``random`` batches padded to their longest chat, ``group_by_length`` batches of similar
chats, or ``padding_free``: one flattened sequence per batch). For each, the real ``SFTTrainer`` of
:func:`rl.train.sft.sft_trainer` trains the ``s`` model on the benchmark's train split for ``--steps`` timed
steps (after ``--warmup``), with evaluation and checkpoints off. Reported per candidate:

- tokens per chat (over the whole tokenized train set), and the share of the timed steps' tokens that is
  padding (from the trainer's own data loader);
- the median seconds per step and chats per second, and the ratio of chats/s to the first candidate;
- the median seconds of a bare forward, backward and AdamW step on one of the same batches, which is what
  the model costs at that shape without the trainer around it.

Each candidate runs under every ``--precision`` given (``fp32``, ``bf16`` mixed precision, or ``auto``: bf16
where the CPU computes it natively, :func:`rl.train.run.uses_bf16`), and with gradient checkpointing ``off``
and ``on`` as ``--gradient-checkpointing`` asks (TRL's default is on), so each is compared on the same
batches; ``--size`` picks the model (the defaults file's, ``s``, unless given; the quick demo trains ``t``).

Chats per second is the comparable number: a chat is one training example whatever its tokenization.
Prints a table and writes ``bench/results/sft_recipe.json``. Needs a workspace with a synthesized benchmark
(``prore bench synth``; ``make demo`` makes one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS, machine, run_main, write_results

from rl.train.model import SIZES
from rl.train.run import PRECISIONS

CANDIDATES = {
    "short/lines/random": ("short", "lines", "random"),
    "short/lines/grouped": ("short", "lines", "group_by_length"),
    "compact/lines/grouped": ("compact", "lines", "group_by_length"),
    "short/words/grouped": ("short", "words", "group_by_length"),
    "compact/words/grouped": ("compact", "words", "group_by_length"),
    "compact/words/padding-free": ("compact", "words", "padding_free"),
}
"""name -> (prompt profile, tokenizer split, batching); the first is the recipe before this bench."""


def _bare_step_s(trainer: Any, batch: dict[str, Any], steps: int) -> float:
    """Median seconds of a bare forward, backward and AdamW step of the trained model on one of the trainer's
    own batches: what the model costs at that shape, without the trainer around it."""
    import torch

    model = trainer.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    inputs = {
        k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "labels")
    }
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        model(**inputs).loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _measure(
    ws: Path,
    candidate: tuple[str, str, str],
    precision: str,
    checkpointing: bool,
    size: str | None,
    steps: int,
    warmup: int,
    limit: int | None,
) -> dict[str, Any]:
    from transformers import TrainerCallback

    from rl.train.config import load_defaults, replace
    from rl.train.run import trained_in
    from rl.train.sft import SftJob, sft_trainer

    profile, split, batching = candidate
    d = load_defaults()
    params = replace(d.sft, max_steps=warmup + steps, group_by_length=batching == "group_by_length")
    with tempfile.TemporaryDirectory() as out:
        job = SftJob(workspace=ws, domains=("ecommerce", "email"), out=Path(out), params=params,
                     size=size or d.model_size, profile=profile, vocab_size=d.vocab_size,  # type: ignore[arg-type]
                     max_token_chars=d.max_token_chars, split=split, limit=limit, precision=precision,  # type: ignore[arg-type]
                     gradient_checkpointing=checkpointing)  # fmt: skip
        # max_length None: no chat is truncated or dropped (short/words chats pass the recipe's 512 tokens)
        free: dict[str, Any] = {"padding_free": batching == "padding_free", "max_length": None}
        trainer, _, train_rows = sft_trainer(job, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
                                             report_to=[], disable_tqdm=True, **free)  # fmt: skip
        real = padded = 0
        for i, batch in enumerate(trainer.get_train_dataloader()):
            if i == warmup + steps:
                break
            ids = batch["input_ids"]
            padded += ids.numel()
            real += int(batch["attention_mask"].sum()) if "attention_mask" in batch else ids.numel()
        stamps: list[float] = []

        class Clock(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, *a: Any, **k: Any) -> None:
                stamps.append(time.perf_counter())

        trainer.add_callback(Clock())
        trainer.train()
        bare_s = _bare_step_s(trainer, batch, steps=min(steps, 5))
    step_times = [b - a for a, b in zip(stamps[warmup - 1 :], stamps[warmup:], strict=False)]
    step_s = statistics.median(step_times)
    return {"profile": profile, "split": split, "batching": batching, **trained_in(trainer.args),
            "size": job.size, "train_chats": len(train_rows),
            "tokens_per_chat": round(statistics.fmean(len(x) for x in trainer.train_dataset["input_ids"]), 1),
            "padding_share": round(1 - real / padded, 3) if padded else 0.0,
            "step_s_median": round(step_s, 3), "bare_step_s_median": round(bare_s, 3),
            "chats_per_s": round(params.batch_size / step_s, 2),
            "steps_timed": len(step_times)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=os.environ.get("PRORE_WORKSPACE", ".prore"),
                    help="workspace with a synthesized benchmark (default $PRORE_WORKSPACE or .prore)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=10, help="timed optimizer steps per candidate")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument(
        "--limit", type=int, help="at most N training chats per domain (the tokenizer trains on them)"
    )
    ap.add_argument("--candidates", nargs="+", choices=list(CANDIDATES), default=list(CANDIDATES))
    ap.add_argument("--precision", nargs="+", choices=PRECISIONS, default=["auto"],
                    help="measure every candidate under each of these (default auto)")  # fmt: skip
    ap.add_argument("--gradient-checkpointing", nargs="+", choices=("off", "on"), default=["off"],
                    help="measure every candidate with gradient checkpointing off, on, or both (default off)")  # fmt: skip
    ap.add_argument("--size", choices=list(SIZES), help="model size (default: the defaults file's)")
    ap.add_argument("--out", default=str(RESULTS / "sft_recipe.json"))
    args = ap.parse_args()
    from tqdm import tqdm

    from rl.train.config import load_defaults

    rows = []
    runs = [(name, precision, gc == "on") for name in args.candidates for precision in args.precision
            for gc in args.gradient_checkpointing]  # fmt: skip
    for name, precision, checkpointing in tqdm(runs, desc="candidates", unit="run"):
        got = _measure(Path(args.workspace), CANDIDATES[name], precision, checkpointing, args.size, args.steps,
                       args.warmup, args.limit)  # fmt: skip
        gc = "/checkpointed" if got["gradient_checkpointing"] else ""
        rows.append({"candidate": f"{name}/{got['precision']}{gc}", **got})
    base = rows[0]["chats_per_s"]
    for r in rows:
        r["chats_per_s_ratio"] = round(r["chats_per_s"] / base, 2)
    print(
        f"{'candidate':46} {'tok/chat':>9} {'padding':>8} {'s/step':>8} {'bare s/step':>12} {'chats/s':>8} {'ratio':>6}"
    )
    for r in rows:
        print(f"{r['candidate']:46} {r['tokens_per_chat']:>9} {r['padding_share']:>8.1%} {r['step_s_median']:>8} "
              f"{r['bare_step_s_median']:>12} {r['chats_per_s']:>8} {r['chats_per_s_ratio']:>5}x")  # fmt: skip
    info = machine()
    print(
        f"size {rows[0]['size']}, batch {load_defaults().sft.batch_size}; median of {args.steps} steps after {args.warmup}; {info}"
    )
    write_results(args.out, {"machine": info, "steps": args.steps, "warmup": args.warmup, "rows": rows})


if __name__ == "__main__":
    run_main(main)
