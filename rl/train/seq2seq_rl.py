"""GRPO and DAPO for the encoder-decoder planner (``prore train grpo|dapo --init`` a ``minilm-seq2seq`` run).

TRL's ``GRPOTrainer`` and verl train causal LMs only, so this is GRPO on transformers' ``Trainer``: the
optimizer, schedule, logging, checkpoints and resume are the library's; a step's :meth:`compute_loss` is the
RL. For each of ``prompts_per_step`` requests it samples ``num_generations`` programs from the current policy
(:meth:`serving.seq2seq.Seq2SeqPlanner.generate`, under the grounded program grammar that evaluation and
``prore serve`` decode with, so the policy explores only programs they could write), scores them with the
layered reward (:class:`rl.train.rewards.LayeredReward`, in-process on the workspace's indexes), normalizes
each group's rewards into advantages, and takes one gradient step on the samples' log-likelihoods weighted
by their advantages.

One optimizer step per generation batch (TRL's ``num_iterations`` 1, the recipe's default) makes the policy
ratio 1, so PPO's clip never acts and the loss is the policy gradient itself; the KL term to the initial model
is left out (``beta`` 0, as DAPO drops it). ``loss_type`` aggregates as TRL does: ``grpo`` averages each
sample's tokens and then the samples, ``dapo`` averages over all tokens of the batch. A group whose rewards
are all equal has zero advantage and teaches nothing; ``--filter-prompts`` keeps, before training, only the
prompts whose samples from the initial model differ (:mod:`rl.train.prompt_filter`, DAPO's dynamic sampling).

MiniLM's encoder stays frozen here (its output for a request is the same at every step); the decoder learns.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

from rl.errors import TrainError
from rl.train import logs
from rl.train.data import load_instances, split_train_val, window
from rl.train.familiarity import carry_familiarity
from rl.train.grpo import RlJob
from rl.train.prompt_filter import filter_key, filter_rows, record_filter, recorded_rows, saved_filter
from rl.train.rewards import LayeredReward, in_process, reward_config
from rl.train.run import FINAL, common_args, threads, to_jsonable, trained_in, write_card, write_run
from serving.dsl.grounding import read_column_values
from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
from serving.prompt import read_card, request_text
from serving.seq2seq import ARCH, ENCODER_TOKENIZER, Seq2SeqPlanner


def is_seq2seq(path: Any) -> bool:
    """Whether the model directory ``path`` holds an encoder-decoder planner (its card names the ``arch``)."""
    return path is not None and read_card(path).get("arch") == ARCH


class _Prompts:
    """The RL rows (a torch ``Dataset``): each request with what the reward scores it against."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = list(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]


def advantages(rewards: Sequence[float], group: int) -> list[float]:
    """GRPO's advantages: each reward less its group's mean, over the group's standard deviation (0 for a group
    of equal rewards).

    >>> advantages([1.0, 3.0, 2.0, 2.0], 2)
    [-1.0, 1.0, 0.0, 0.0]
    """
    import statistics

    out: list[float] = []
    for at in range(0, len(rewards), group):
        g = rewards[at : at + group]
        mean, std = statistics.fmean(g), statistics.pstdev(g)
        out += [(r - mean) / std if std > 0 else 0.0 for r in g]
    return out


def _trainer_class() -> Any:
    from transformers import Trainer

    class Seq2SeqGrpoTrainer(Trainer):
        """transformers' ``Trainer`` whose loss samples, scores and weighs (this module's docstring)."""

        def setup_rl(self, planner: Seq2SeqPlanner, reward: LayeredReward, grammars: dict[str, Any], *,
                     group: int, temperature: float, max_tokens: int, loss_type: str) -> None:  # fmt: skip
            self.planner, self.reward, self.grammars = planner, reward, grammars
            self.group, self.temperature, self.max_tokens, self.loss_type = (
                group,
                temperature,
                max_tokens,
                loss_type,
            )
            self._stats: dict[str, list[float]] = {}

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:  # fmt: skip
            import torch

            rows: list[dict[str, Any]] = inputs
            texts = [request_text(r["domain"], r["nl"]) for r in rows]
            grammars = [self.grammars[r["domain"]](r["nl"]) for r in rows]
            model.eval()
            drawn = self.planner.generate(texts, grammars=grammars, max_tokens=self.max_tokens, samples=self.group,
                                          temperature=self.temperature,
                                          seed=self.args.seed * 1_000_003 + self.state.global_step)  # fmt: skip
            model.train()
            model.encoder.eval()  # frozen: no dropout
            samples = [g for group in drawn for g in group]
            columns = {
                key: [r[key] for r in rows for _ in range(self.group)]
                for key in ("domain", "gold_id", "relevant")
            }
            layered = self.reward.layers([g.text for g in samples], columns)
            rewards = [sum(layer) for layer in layered]
            adv = torch.tensor(advantages(rewards, self.group))
            tok = self.planner.tokenizer
            enc = self.planner.encoder_tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
            ids = [[*g.ids, *([tok.eos_token_id] if g.finished else [])] for g in samples]
            width = max(1, max(len(i) for i in ids))
            labels = torch.full((len(ids), width), -100, dtype=torch.long)
            for n, row in enumerate(ids):
                labels[n, : len(row)] = torch.tensor(row, dtype=torch.long)
            out = model(input_ids=enc["input_ids"].repeat_interleave(self.group, 0),
                        attention_mask=enc["attention_mask"].repeat_interleave(self.group, 0), labels=labels)  # fmt: skip
            mask = labels != -100
            logp = (
                torch.log_softmax(out.logits.float(), -1)
                .gather(-1, labels.clamp(min=0).unsqueeze(-1))
                .squeeze(-1)
            )
            weighted = -(adv.unsqueeze(1) * logp) * mask
            if self.loss_type == "dapo":  # token-level: every token of the batch counts once
                loss = weighted.sum() / mask.sum().clamp(min=1)
            else:  # grpo: each sample's token mean, then the mean over samples
                loss = (weighted.sum(1) / mask.sum(1).clamp(min=1)).mean()
            self._note("reward", rewards)
            for name, column in zip(("format", "execution", "accuracy", "length"), zip(*layered, strict=True),
                                    strict=True):  # fmt: skip
                self._note(f"rewards/{name}", list(column))
            zero = sum(
                1 for at in range(0, len(rewards), self.group) if len(set(rewards[at : at + self.group])) == 1
            )
            self._note("frac_reward_zero_std", [zero / len(rows)])
            self._note("completion_length", [float(len(i)) for i in ids])
            return (loss, out) if return_outputs else loss

        def _note(self, name: str, values: Sequence[float]) -> None:
            self._stats.setdefault(name, []).extend(values)

        def log(self, logs_: dict[str, float], start_time: float | None = None) -> None:
            for name, values in self._stats.items():
                logs_[name] = sum(values) / len(values)
            self._stats = {}
            super().log(logs_, start_time)

    return Seq2SeqGrpoTrainer


def run_seq2seq_rl(job: RlJob) -> dict[str, Any]:
    """GRPO or DAPO from the encoder-decoder planner ``job.init``; the last model goes to ``out/final`` with the
    init's encoder tokenizer and a card; returns a summary as :func:`rl.train.grpo.run_rl` does."""
    import torch
    from transformers import TrainingArguments

    p = job.params
    if job.init is None or job.reward_url or job.profile not in (None, "request") or p.num_iterations != 1:
        raise TrainError(f"RL of a {ARCH} planner starts from its SFT run (--init), scores in-process (no "
                         "--reward-url: the grounded grammar reads the index's column values), reads the request "
                         "profile and takes one optimizer step per generation batch (--num-iterations 1)",
                         code="train_config")  # fmt: skip
    torch.set_num_threads(threads())
    write_run(job.out, {"algorithm": job.algorithm, "arch": ARCH, "params": job.params, "init": str(job.init),
                        "domains": list(job.domains), "reward_target": job.reward_target, "limit": job.limit,
                        "offset": job.offset, "seed": job.seed})  # fmt: skip
    from indexing.workspace import Workspace
    from rl.reward import RewardScorer

    ws = Workspace(job.bench_workspace or job.cfg.workspace)
    rows: list[dict[str, Any]] = []
    for domain in job.domains:
        train, _ = split_train_val(load_instances(ws, [domain], "train"))
        rows += [{"qid": i.qid, "nl": i.nl, "domain": i.domain, "gold_id": i.gold_id,
                  "relevant": list(i.relevant_ids)} for i in window(train, offset=job.offset, limit=job.limit)]  # fmt: skip
    planner = Seq2SeqPlanner(job.init)
    model = planner.model
    model.encoder.requires_grad_(False)
    scorer = RewardScorer.open(job.cfg, job.domains, reward_config(job.reward_target, p.execution_credit),
                               tokenizer=planner.tokenizer)  # fmt: skip
    reward = LayeredReward(in_process(scorer), job.reward_target, p.execution_credit)
    grammars = {}
    for domain in job.domains:
        engine = scorer.engines[domain]
        grammars[domain] = functools.partial(
            _grounded, engine.schema, read_column_values(engine.handle, engine.schema)
        )
    try:
        t0 = time.perf_counter()
        stats = None
        if p.filter_prompts:
            # The filter samples with fixed seeds, so its outcome depends on this key alone, not on --seed: a
            # resumed run, or another seed's run given the same prompt_filter.json, trains on the same prompts.
            key = filter_key(job.init, rows, samples=p.num_generations, temperature=p.temperature,
                             max_tokens=p.max_completion_length, target=job.reward_target, on=p.filter_on,
                             execution_credit=p.execution_credit)  # fmt: skip
            kept = saved_filter(job.out, key)
            if kept is None:
                rows, stats = _filter(planner, rows, grammars, reward, p)
                stats = dataclasses.replace(stats, seconds=round(time.perf_counter() - t0, 1))
                record_filter(job.out, key, rows, stats)
            else:
                rows = recorded_rows(rows, kept, job.out, p.filter_on)
            if len(rows) < p.prompts_per_step:
                raise TrainError(f"the prompt filter kept {len(rows)} prompts, fewer than one step's "
                                 f"{p.prompts_per_step}: sample more (--limit) or train without --filter-prompts",
                                 code="train_filter")  # fmt: skip
        args = TrainingArguments(**common_args(job), per_device_train_batch_size=p.prompts_per_step,
                                 learning_rate=p.learning_rate, max_steps=p.max_steps, logging_steps=p.logging_steps,
                                 save_strategy="steps", save_steps=p.save_steps, save_total_limit=p.save_total_limit,
                                 lr_scheduler_type="constant", remove_unused_columns=False)  # fmt: skip
        trainer = _trainer_class()(model=model, args=args, train_dataset=_Prompts(rows),
                                   data_collator=lambda batch: batch)  # fmt: skip
        trainer.setup_rl(planner, reward, grammars, group=p.num_generations, temperature=p.temperature,
                         max_tokens=p.max_completion_length, loss_type=p.loss_type)  # fmt: skip
        _, resume, wall = logs.train_resumably(trainer, job.out)
    finally:
        scorer.close()
    final = job.out / FINAL
    trainer.save_model(str(final))
    planner.tokenizer.save_pretrained(str(final))
    planner.encoder_tokenizer.save_pretrained(str(final / ENCODER_TOKENIZER))
    card = read_card(job.init)
    write_card(final, profile="request", domains=job.domains, algorithm=job.algorithm, arch=ARCH,
               init=str(job.init), reward_target=job.reward_target, execution_credit=p.execution_credit,
               encoder=card.get("encoder"), **carry_familiarity(job.init, final))  # fmt: skip
    records = logs.read_metrics(job.out)
    last = [r for r in records if "reward" in r][-10:]
    steps = int(trainer.state.global_step)
    summary: dict[str, Any] = to_jsonable({
        "algorithm": job.algorithm,
        "arch": ARCH,
        "out": str(final),
        "steps": steps,
        "resumed_from": str(resume) if resume else None,
        "prompts": len(rows),
        "filter": dataclasses.asdict(stats) if stats else None,
        "wall_s": round(wall, 1),
        **trained_in(args),
        "s_per_step": round(wall / max(1, steps), 2),
        "reward_last10": round(sum(r["reward"] for r in last) / len(last), 4) if last else None,
    })  # fmt: skip
    return summary


def _grounded(schema: Any, values: dict[str, tuple[str, ...]], nl: str) -> str:
    """The grounded program grammar of the request ``nl`` (Lark), as evaluation and ``prore serve`` decode with."""
    return constraint_grammar(schema, "grounded", STRUCTURED_LIMITS, request=nl, values=values, lark=True)


def _filter(planner: Seq2SeqPlanner, rows: list[dict[str, Any]], grammars: dict[str, Any], reward: LayeredReward,
            p: Any) -> tuple[list[dict[str, Any]], Any]:  # fmt: skip
    """The rows whose ``num_generations`` samples from the initial planner earn differing rewards (``filter_on``),
    and the filter's counts (:func:`rl.train.prompt_filter.filter_rows`)."""
    samples: list[list[str]] = []
    batch = max(1, 32 // p.num_generations)
    for at in range(0, len(rows), batch):
        part = rows[at : at + batch]
        got = planner.generate([request_text(r["domain"], r["nl"]) for r in part],
                               grammars=[grammars[r["domain"]](r["nl"]) for r in part],
                               max_tokens=p.max_completion_length, samples=p.num_generations,
                               temperature=p.temperature, seed=at)  # fmt: skip
        samples += [[g.text for g in group] for group in got]
    return filter_rows(rows, samples, reward.layers, temperature=p.temperature, on=p.filter_on)
