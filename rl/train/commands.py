"""``prore train sft|grpo|dapo --backend local`` and ``prore train plot``: the local trainer's commands.

    prore train sft  [--domain D ...] [--size s] [--max-steps N] [--limit N] [--offset N] [--exemplars K] [--augment-mutations] [--out DIR]
    prore train grpo --init RUN/final [--reward-url URL] [--reward-target hit1|satisfy|mrr] [--max-steps N]
    prore train dapo --init RUN/final ...
    prore train plot RUN [RUN ...] [--out FILE.png]

They join the ``prore train`` group of :mod:`rl.verl.commands` (whose ``launch`` runs verl on a cluster).
Every default comes from ``rl/train/defaults.yaml``; a flag wins over it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from indexing.config import Config
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.errors import TrainError
from rl.prompt import PROFILES
from rl.reward import ACCURACY_MODES
from rl.train.config import FILTER_ON, load_defaults, replace
from rl.train.model import SIZES
from rl.train.tokenizer import SPLITS
from rl.train.warm_start import INIT_EMBEDDINGS


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
    d = load_defaults()
    domains = _domains(args)
    out = _out(args, cfg, "sft", domains)
    bench = Path(args.bench or cfg.workspace)
    params = replace(d.sft, epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.lr,
                     batch_size=args.batch_size, eval_steps=args.eval_steps,
                     logging_steps=args.logging_steps)  # fmt: skip
    extra: tuple[tuple[str, str, str], ...] = ()
    if args.augment_mutations:
        from rl.train.augment import augment

        extra = augment(cfg, bench, domains, rollouts_from=Path(args.augment_from) if args.augment_from else None,
                        profile=args.profile or d.profile, limit=args.limit, offset=args.offset,
                        budget=args.mutation_budget, out=out)  # fmt: skip
    job = SftJob(workspace=bench, domains=domains, out=out, params=params,
                 size=args.size or d.model_size, profile=args.profile or d.profile, vocab_size=d.vocab_size,
                 max_token_chars=d.max_token_chars, split=args.tokenizer_split or d.split,
                 init=Path(args.init) if args.init else None,
                 limit=args.limit, offset=args.offset, extra_rows=extra, seed=args.seed,
                 exemplars=args.exemplars, embedder=cfg.embedder, max_minutes=args.max_minutes,
                 recombine=args.recombine, corpus_workspace=cfg.workspace,
                 init_embeddings=args.init_embeddings, deepspeed=args.deepspeed)  # fmt: skip
    _print_summary(run_sft(job), out)
    return 0


def _rl(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.grpo import RlJob, run_rl

    _backend(args)
    d = load_defaults()
    domains = _domains(args)
    out = _out(args, cfg, args.algorithm, domains)
    params = replace(d.rl(args.algorithm), max_steps=args.max_steps, learning_rate=args.lr, beta=args.beta,
                     epsilon=args.epsilon, epsilon_high=args.epsilon_high, num_generations=args.num_generations,
                     prompts_per_step=args.prompts_per_step, num_iterations=args.num_iterations,
                     max_completion_length=args.max_completion_length, save_steps=args.save_steps,
                     logging_steps=args.logging_steps, filter_prompts=args.filter_prompts, filter_on=args.filter_on,
                     execution_credit=args.execution_credit)  # fmt: skip
    job = RlJob(cfg=cfg, domains=domains, out=out, algorithm=args.algorithm, params=params,
                init=Path(args.init) if args.init else None, size=args.size or d.model_size,
                profile=args.profile, reward_url=args.reward_url, reward_target=args.reward_target,
                limit=args.limit, offset=args.offset, seed=args.seed, vocab_size=d.vocab_size,
                max_token_chars=d.max_token_chars, split=args.tokenizer_split or d.split,
                bench_workspace=Path(args.bench) if args.bench else None)  # fmt: skip
    _print_summary(run_rl(job), out)
    return 0


def _plot(args: argparse.Namespace, cfg: Config) -> int:
    from rl.train.plot import plot_runs

    path = plot_runs([Path(r) for r in args.runs], Path(args.out) if args.out else None)
    print(f"training curves: {path}")
    return 0


def _common(p: argparse.ArgumentParser, algorithm: str) -> None:
    p.add_argument("--backend", choices=("local", "verl"), default="local",
                   help="local: TRL on this machine (default); verl: use `prore train launch` instead")
    p.add_argument("--domain", action="append", choices=DOMAINS, help="benchmark to train on (repeatable; default both)")
    p.add_argument("--out", metavar="DIR", help=f"run directory (default <workspace>/runs/{algorithm}-<domains>)")
    p.add_argument("--init", metavar="DIR", help="start from this model directory (an SFT run's final/)")
    p.add_argument("--size", choices=tuple(SIZES), help="model size when starting from random weights (default: defaults.yaml)")
    p.add_argument("--profile", choices=PROFILES, help="prompt profile (default: defaults.yaml, or the init model's)")
    p.add_argument("--tokenizer-split", choices=SPLITS,
                   help="pre-split of a new tokenizer: words or lines (default: defaults.yaml; ignored with --init)")
    p.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps")
    p.add_argument("--lr", type=float, metavar="LR", help="learning rate")
    p.add_argument("--limit", type=int, metavar="N", help="at most N training instances per domain")
    p.add_argument("--offset", type=int, default=0, metavar="N",
                   help="skip the first N training instances per domain (after an SFT run's --limit N: "
                   "prompts it never trained on)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data order and sampling")
    p.add_argument("--logging-steps", type=int, metavar="N", help="log every N steps")
    p.add_argument("--bench", metavar="DIR",
                   help="workspace whose benchmark is trained on (default: --workspace, which serves the indexes)")
    p.set_defaults(algorithm=algorithm)


def register_local(actions: Any) -> None:
    """Add ``sft``, ``grpo``, ``dapo`` and ``plot`` to the ``prore train`` group's sub-parsers."""
    d = load_defaults()
    s = actions.add_parser("sft", help="supervised fine-tuning of a small planner on this machine (TRL)",
                           description="SFT on the benchmark's (prompt, gold program) chats; keeps the checkpoint "
                           "with the lowest validation loss in <out>/final; resumes an interrupted run.")  # fmt: skip
    _common(s, "sft")
    s.add_argument("--epochs", type=float, help=f"epochs (default {d.sft.epochs})")
    s.add_argument("--batch-size", type=int, help=f"chats per step (default {d.sft.batch_size})")
    s.add_argument("--eval-steps", type=int, help=f"validate and checkpoint every N steps (default {d.sft.eval_steps})")
    s.add_argument("--max-minutes", type=float, metavar="M",
                   help="stop after M minutes of training, with a last evaluation and checkpoint (ablations at "
                   "equal wall clock; the learning-rate schedule still follows --max-steps)")  # fmt: skip
    s.add_argument("--recombine", type=int, metavar="N", default=d.recombine,
                   help="N recombined copies of each training pair whose search phrases the request says "
                   "verbatim, swapped for corpus word spans in request and program alike (rl.train.recombine), "
                   f"which teaches copying the request's phrase (default: defaults.yaml, {d.recombine})")  # fmt: skip
    s.add_argument("--exemplars", type=int, metavar="K", default=d.exemplars,
                   help="exemplars per prompt, retrieved from an index of the run's training pairs that ships "
                   f"with the model (serving.exemplars); 0: none (default: defaults.yaml, {d.exemplars})")  # fmt: skip
    s.add_argument("--init-embeddings", choices=INIT_EMBEDDINGS, default=d.init_embeddings,
                   help="how a new model's token embeddings start: random, or minilm (each token from MiniLM's "
                   f"WordPiece embeddings of its text, rl.train.warm_start); default: defaults.yaml, {d.init_embeddings}")
    s.add_argument("--deepspeed", metavar="CONFIG",
                   help="train under DeepSpeed ZeRO through accelerate: zero2, zero3 (the configs of "
                   "rl/train/deepspeed) or a JSON file; started without a launcher, a world of one (gloo on "
                   "CPU); under `accelerate launch` or `deepspeed`, one rank per process")  # fmt: skip
    s.add_argument("--augment-mutations", action="store_true",
                   help="add training pairs repaired by verified mutation (rl.mutate)")
    s.add_argument("--augment-from", metavar="DIR",
                   help="with --augment-mutations: a model whose failed rollouts on the train split are repaired")
    s.add_argument("--mutation-budget", type=int, default=64, help="mutants tried per program (default 64, at most 256)")
    s.set_defaults(handler=_sft)
    for algorithm in ("grpo", "dapo"):
        r = d.rl(algorithm)
        x = actions.add_parser(algorithm, help=f"{algorithm.upper()} on a small planner on this machine (TRL)",
                               description=f"{algorithm.upper()} with TRL's GRPOTrainer (loss_type={r.loss_type}, "
                               f"clip {r.epsilon}/{r.epsilon_high}, KL {r.beta}, G={r.num_generations}) and the "
                               "layered reward.")  # fmt: skip
        _common(x, algorithm)
        x.add_argument("--reward-url", metavar="URL", help="score through the reward service (default: in-process)")
        x.add_argument("--reward-target", choices=ACCURACY_MODES, default="hit1",
                       help="S_r: hit1 (the paper's, default), satisfy (the relevant sets) or mrr")
        x.add_argument("--execution-credit", type=float, metavar="C",
                       help="share of the execution layer a program that runs and misses earns, 0 to 1: 1 is the "
                       f"paper's reward, 0 pays running only with accuracy (default {r.execution_credit})")
        x.add_argument("--beta", type=float, help=f"KL coefficient (default {r.beta})")
        x.add_argument("--epsilon", type=float, help=f"lower clip (default {r.epsilon})")
        x.add_argument("--epsilon-high", type=float, help=f"upper clip (default {r.epsilon_high})")
        x.add_argument("--num-generations", type=int, help=f"completions per prompt, G (default {r.num_generations})")
        x.add_argument("--prompts-per-step", type=int, help=f"prompts per step (default {r.prompts_per_step})")
        x.add_argument("--num-iterations", type=int, metavar="MU",
                       help=f"optimizer steps per generation batch, TRL's mu; above 1 the clip acts (default {r.num_iterations})")
        x.add_argument("--max-completion-length", type=int, help=f"tokens per completion (default {r.max_completion_length})")
        x.add_argument("--filter-prompts", action=argparse.BooleanOptionalAction, default=None,
                       help="train only on prompts whose G samples from --init earn differing rewards (DAPO's "
                       f"dynamic sampling, once before training; default {r.filter_prompts})")
        x.add_argument("--filter-on", choices=FILTER_ON,
                       help="what must differ within a kept group: reward (any layer) or accuracy (some samples "
                       f"hit and some miss, DAPO's rule; default {r.filter_on})")
        x.add_argument("--save-steps", type=int, help=f"checkpoint every N steps (default {r.save_steps})")
        x.set_defaults(handler=_rl)
    p = actions.add_parser("plot", help="draw training curves (loss, reward terms, execution, KL, clipping) to PNG")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories holding metrics.jsonl")
    p.add_argument("--out", metavar="FILE", help="PNG to write (default <first run>/curves.png)")
    p.set_defaults(handler=_plot)
