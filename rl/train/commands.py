"""``prore train sft|grpo|dapo --backend local`` and ``prore train plot``: the local trainer's commands.

    prore train sft  [--domain D ...] [--size s] [--max-steps N] [--limit N] [--offset N] [--exemplars K] [--augment-mutations] [--out DIR]
    prore train grpo --init RUN/final [--reward-url URL] [--reward-target hit1|satisfy|mrr] [--max-steps N]
    prore train dapo --init RUN/final ...
    prore train plot RUN [RUN ...] [--out FILE.png]
    prore train familiarity RUN/final [--domain D ...] [--quantile Q]

They join the ``prore train`` group of :mod:`rl.verl.commands` (whose ``launch`` runs verl on a cluster).
Every default comes from ``rl/train/defaults.yaml``; a flag wins over it. The flags of the file's keys are built
from the fields of :class:`~rl.train.config.Defaults`, :class:`~rl.train.config.SftParams` and
:class:`~rl.train.config.RlParams` (:mod:`core.flags`).
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

from core.flags import Flag, Flags
from indexing.config import Config
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.errors import TrainError
from rl.reward import ACCURACY_MODES
from rl.train.config import ENCODER_LR, Defaults, RlParams, SftParams, load_defaults
from rl.train.model import SIZES
from serving.familiarity import DEFAULT_QUANTILE


@functools.cache
def model_flags(algorithm: str) -> Flags[Defaults]:
    """The flags of the defaults file's model, tokenizer and prompt keys (SFT's also exemplars, recombination and
    how the embeddings start)."""
    sft_only = (Flag("recombine", metavar="N"), Flag("exemplars", metavar="K"), "init_embeddings")
    profile = (
        Flag("profile")
        if algorithm == "sft"
        else Flag("profile", default="the --init model's card's, else short")
    )
    return Flags(Defaults, Flag("model_size", "--size", choices=tuple(SIZES)), profile, Flag("split", "--tokenizer-split"),
                 "precision", "gradient_checkpointing", *(sft_only if algorithm == "sft" else ()), defaults=load_defaults())  # fmt: skip


@functools.cache
def params_flags(algorithm: str) -> Flags[Any]:
    """The flags of the defaults file's ``sft`` section (:class:`SftParams`) or ``algorithm``'s (:class:`RlParams`)."""
    d = load_defaults()
    common = (Flag("max_steps", metavar="N"), Flag("learning_rate", "--lr", metavar="LR"),
              Flag("logging_steps", metavar="N"))  # fmt: skip
    if algorithm == "sft":
        return Flags(SftParams, *common, "epochs", "batch_size", "eval_steps", defaults=d.sft)
    return Flags(RlParams, *common, Flag("execution_credit", metavar="C"), "beta", "epsilon", "epsilon_high",
                 "num_generations", "prompts_per_step", Flag("num_iterations", metavar="MU"), "max_completion_length",
                 "filter_prompts", "filter_on", "save_steps", defaults=d.rl(algorithm))  # fmt: skip


def _domains(args: argparse.Namespace) -> tuple[str, ...]:
    domains = tuple(dict.fromkeys(args.domain or DOMAINS))
    for d in domains:
        schema_for(d)
    return domains


def _out(args: argparse.Namespace, cfg: Config, algorithm: str, domains: tuple[str, ...]) -> Path:
    if args.out:
        return Path(args.out)
    return Workspace(cfg.workspace).root / "runs" / f"{algorithm}-{'+'.join(domains)}"


def _backend(args: argparse.Namespace) -> None:
    if args.backend != "local":
        raise TrainError(f"backend {args.backend!r} runs on a cluster: use `prore train launch {args.algorithm}`",
                         code="train_backend")  # fmt: skip


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def _sft(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.sft import SftJob, run_sft

    _backend(args)
    d = model_flags("sft").over(load_defaults(), args)
    domains = _domains(args)
    out = _out(args, cfg, "sft", domains)
    bench = Path(args.bench or cfg.workspace)
    params = params_flags("sft").over(d.sft, args)
    extra: tuple[tuple[str, str, str], ...] = ()
    if args.augment_mutations:
        from rl.train.augment import augment

        extra = augment(cfg, bench, domains, rollouts_from=Path(args.augment_from) if args.augment_from else None,
                        profile=d.profile, limit=args.limit, offset=args.offset,
                        budget=args.mutation_budget, out=out)  # fmt: skip
    job = SftJob(workspace=bench, domains=domains, out=out, params=params,
                 size=d.model_size, profile=d.profile, vocab_size=d.vocab_size,
                 max_token_chars=d.max_token_chars, split=d.split,
                 init=Path(args.init) if args.init else None,
                 limit=args.limit, offset=args.offset, extra_rows=extra, seed=args.seed,
                 exemplars=d.exemplars, embedder=cfg.embedder, max_minutes=args.max_minutes,
                 recombine=d.recombine, corpus_workspace=cfg.workspace,
                 init_embeddings=d.init_embeddings, deepspeed=args.deepspeed, precision=d.precision,
                 gradient_checkpointing=d.gradient_checkpointing,
                 encoder_trainable_layers=args.encoder_trainable_layers, encoder_lr=args.encoder_lr)  # fmt: skip
    if args.arch != "minilm-seq2seq" and args.encoder_trainable_layers:
        raise TrainError("--encoder-trainable-layers is the encoder-decoder's (--arch minilm-seq2seq)",
                         code="train_config")  # fmt: skip
    if args.arch == "minilm-seq2seq":
        from rl.train.seq2seq import run_seq2seq

        _print_summary(run_seq2seq(job), out)
        return 0
    _print_summary(run_sft(job), out)
    return 0


def _rl(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.grpo import RlJob, run_rl

    _backend(args)
    flags = model_flags(args.algorithm)
    d = flags.over(load_defaults(), args)
    domains = _domains(args)
    out = _out(args, cfg, args.algorithm, domains)
    params = params_flags(args.algorithm).over(d.rl(args.algorithm), args)
    job = RlJob(cfg=cfg, domains=domains, out=out, algorithm=args.algorithm, params=params,
                init=Path(args.init) if args.init else None, size=d.model_size,
                profile=flags.given(args).get("profile"),  # not given: the initial model's, else the file's
                reward_url=args.reward_url, reward_target=args.reward_target,
                limit=args.limit, offset=args.offset, seed=args.seed, vocab_size=d.vocab_size,
                max_token_chars=d.max_token_chars, split=d.split, precision=d.precision,
                gradient_checkpointing=d.gradient_checkpointing,
                bench_workspace=Path(args.bench) if args.bench else None)  # fmt: skip
    from rl.train.seq2seq_rl import is_seq2seq, run_seq2seq_rl

    _print_summary(run_seq2seq_rl(job) if is_seq2seq(job.init) else run_rl(job), out)
    return 0


def _plot(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.plot import plot_runs

    path = plot_runs([Path(r) for r in args.runs], Path(args.out) if args.out else None)
    print(f"training curves: {path}")
    return 0


def _familiarity(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.familiarity import add_familiarity

    bench = Workspace(Path(args.bench)) if args.bench else Workspace(cfg.workspace)
    section = add_familiarity(Path(args.model), bench, domains=args.domain, quantile=args.quantile)
    shown = ", ".join(f"{d} {t:.3f}" for d, t in section["threshold"].items())
    print(f"familiarity gate of {args.model}: {sum(section['requests'].values()):,} training requests, thresholds {shown} "
          f"(quantile {section['quantile']:g}); evaluate with ?fuse=self-query&gate=familiar, serve with "
          "--fuse-gate familiar")  # fmt: skip
    return 0


def _common(p: argparse.ArgumentParser, algorithm: str) -> None:
    p.add_argument(
        "--backend",
        choices=("local", "verl"),
        default="local",
        help="local: TRL on this machine (default); verl: use `prore train launch` instead",
    )
    p.add_argument(
        "--domain", action="append", choices=DOMAINS, help="benchmark to train on (repeatable; default both)"
    )
    p.add_argument(
        "--out", metavar="DIR", help=f"run directory (default <workspace>/runs/{algorithm}-<domains>)"
    )
    p.add_argument("--init", metavar="DIR", help="start from this model directory (an SFT run's final/)")
    model_flags(algorithm).add_to(p)
    params_flags(algorithm).add_to(p)
    p.add_argument("--limit", type=int, metavar="N", help="at most N training instances per domain")
    p.add_argument("--offset", type=int, default=0, metavar="N",
                   help="skip the first N training instances per domain (after an SFT run's --limit N: "
                   "prompts it never trained on)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data order and sampling")
    p.add_argument(
        "--bench",
        metavar="DIR",
        help="workspace whose benchmark is trained on (default: --workspace, which serves the indexes)",
    )
    p.set_defaults(algorithm=algorithm)


def register_local(actions: Any) -> None:
    """Add ``sft``, ``grpo``, ``dapo``, ``familiarity`` and ``plot`` to the ``prore train`` group's sub-parsers."""
    d = load_defaults()
    s = actions.add_parser("sft", help="supervised fine-tuning of a small planner on this machine (TRL)",
                           description="SFT on the benchmark's (prompt, gold program) chats; keeps the checkpoint "
                           "with the lowest validation loss in <out>/final; resumes an interrupted run. Defaults: "
                           "rl/train/defaults.yaml.")  # fmt: skip
    _common(s, "sft")
    s.add_argument("--max-minutes", type=float, metavar="M",
                   help="stop after M minutes of training, with a last evaluation and checkpoint (ablations at "
                   "equal wall clock; the learning-rate schedule still follows --max-steps)")  # fmt: skip
    s.add_argument("--deepspeed", metavar="CONFIG",
                   help="train under DeepSpeed ZeRO through accelerate: zero2, zero3 (the configs of "
                   "rl/train/deepspeed) or a JSON file; started without a launcher, a world of one (gloo on "
                   "CPU); under `accelerate launch` or `deepspeed`, one rank per process")  # fmt: skip
    s.add_argument("--arch", choices=("decoder", "minilm-seq2seq"), default="decoder",
                   help="decoder: the Qwen3 decoder-only planner (default; vLLM, prore serve and verl run it); "
                   "minilm-seq2seq: MiniLM's pretrained encoder, frozen, and a small GPT-2 decoder of --size "
                   "(rl/train/seq2seq.py; evaluated as seq2seq:RUN/final through transformers, not vLLM)")  # fmt: skip
    s.add_argument("--encoder-trainable-layers", type=int, default=0, metavar="N",
                   help="with --arch minilm-seq2seq: train MiniLM's top N of its 6 layers with the decoder "
                   "(default 0: the encoder stays frozen)")  # fmt: skip
    s.add_argument("--encoder-lr", type=float, default=ENCODER_LR, metavar="LR",
                   help=f"with --encoder-trainable-layers: their learning rate (default {ENCODER_LR:g}, a BERT "
                   "fine-tuning rate; --lr is the decoder's)")  # fmt: skip
    s.add_argument(
        "--augment-mutations",
        action="store_true",
        help="add training pairs repaired by verified mutation (rl.mutate)",
    )
    s.add_argument(
        "--augment-from",
        metavar="DIR",
        help="with --augment-mutations: a model whose failed rollouts on the train split are repaired",
    )
    s.add_argument(
        "--mutation-budget", type=int, default=64, help="mutants tried per program (default 64, at most 256)"
    )
    s.set_defaults(handler=_sft)
    for algorithm in ("grpo", "dapo"):
        r = d.rl(algorithm)
        x = actions.add_parser(algorithm, help=f"{algorithm.upper()} on a small planner on this machine (TRL)",
                               description=f"{algorithm.upper()} with TRL's GRPOTrainer (loss_type={r.loss_type}, "
                               f"clip {r.epsilon}/{r.epsilon_high}, KL {r.beta}, G={r.num_generations}) and the "
                               "layered reward. Defaults: rl/train/defaults.yaml.")  # fmt: skip
        _common(x, algorithm)
        x.add_argument(
            "--reward-url", metavar="URL", help="score through the reward service (default: in-process)"
        )
        x.add_argument(
            "--reward-target",
            choices=ACCURACY_MODES,
            default="hit1",
            help="S_r: hit1 (the paper's, default), satisfy (the relevant sets) or mrr",
        )
        x.set_defaults(handler=_rl)
    f = actions.add_parser(
        "familiarity", help="give a trained planner its familiarity gate (serving/familiarity.py)",
        description="Copy the benchmark's training requests of the planner's corpora into MODEL/familiarity and "
        "record, on its card, the similarity to the nearest training request above which a request counts as "
        "worded like the training set (the --quantile of the training requests' own leave-one-out similarity). "
        "`?fuse=self-query&gate=familiar` and `prore serve --fuse self-query --fuse-gate familiar` then let the "
        "planner answer such requests alone.")  # fmt: skip
    f.add_argument("model", metavar="MODEL", help="the planner's model directory (a run's final/)")
    f.add_argument("--domain", action="append", choices=DOMAINS,
                   help="corpus whose training requests count (repeatable; default: the card's domains)")  # fmt: skip
    f.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE, metavar="Q",
                   help=f"share of training-like requests judged unfamiliar (default {DEFAULT_QUANTILE:g})")  # fmt: skip
    f.add_argument(
        "--bench", metavar="DIR", help="workspace whose train split is read (default: --workspace)"
    )
    f.set_defaults(handler=_familiarity)
    p = actions.add_parser(
        "plot", help="draw training curves (loss, reward terms, execution, KL, clipping) to PNG"
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories holding metrics.jsonl")
    p.add_argument("--out", metavar="FILE", help="PNG to write (default <first run>/curves.png)")
    p.set_defaults(handler=_plot)
