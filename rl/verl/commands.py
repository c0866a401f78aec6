"""``prore train``: datasets and launch commands for training the planner.

    prore train export {ecommerce|email} [--profile full|short|compact | --planner DIR] [--val-fraction F] [--exemplars K]
    prore train launch {sft|grpo|dapo} [--domain D] [--model M] [--gpus-per-node G] [--nodes N] ... [--print]

The group is registered by :func:`register_train`; later trainers add their actions to the parser it returns.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from indexing.config import Config
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.errors import TrainError
from rl.prompt import PROFILES, Profile
from rl.verl.export import ExportConfig, export, train_dir
from rl.verl.launch import LaunchParams, argv, command_line
from rl.verl.recipes import ALGORITHMS


def _export(args: argparse.Namespace, cfg: Config) -> int:
    ws = Workspace(cfg.workspace)
    profile: Profile = args.profile or "full"
    exemplars_from: Path | None = None
    if args.planner is not None:  # the prompt the planner was trained on: its card's profile and exemplars
        from serving.exemplars import card_exemplars
        from serving.prompt import card_profile, read_card

        if args.profile is not None:
            raise TrainError("give --profile or --planner (whose card names the profile), not both", code="train_profile")
        card = read_card(args.planner)
        profile = card_profile(args.planner)
        exemplars_from = Path(args.planner) if card_exemplars(card) is not None else None
    config = ExportConfig(profile=profile, val_fraction=args.val_fraction, exemplars=args.exemplars,
                          exemplars_from=exemplars_from, embedder=cfg.embedder)  # fmt: skip
    manifest = export(ws, args.domain, config)
    rows = ", ".join(f"{k} {v}" for k, v in manifest["rows"].items())
    ex = manifest["exemplars"]
    shots = f", {ex['k']} exemplars per prompt from index {ex['version']}" if ex else ""
    print(f"{args.domain} training data ({manifest['profile']} prompt{shots}): {rows}")
    print(f"written to {train_dir(ws, args.domain)}")
    return 0


def _from_verl(args: argparse.Namespace, cfg: Config) -> int:
    from rl.verl.checkpoint import import_planner

    out = import_planner(Path(args.checkpoint_dir), Path(args.init), Path(args.out), step=args.step,
                         algorithm=args.algorithm)  # fmt: skip
    print(f"planner written to {out} (use --method planner:{out})")
    return 0


def _launch_params(args: argparse.Namespace, cfg: Config) -> LaunchParams:
    schema_for(args.domain)
    data_dir = args.data_dir or str(train_dir(Workspace(cfg.workspace), args.domain).resolve())
    given: dict[str, Any] = {
        "model": args.model,
        # --cpu: one trainer process per node unless told otherwise (the CPU overrides name the rollout)
        "n_gpus_per_node": args.gpus_per_node or (1 if args.cpu else None),
        "nnodes": args.nodes,
        "data_dir": data_dir,
        "checkpoint_dir": args.checkpoint_dir,
        "experiment": args.experiment or f"{args.domain}-{args.algorithm}",
        "rollout_tp": args.rollout_tp,
        "rollout_engine": args.rollout_engine,
        "micro_batch": args.micro_batch,
    }
    return LaunchParams(
        **{k: v for k, v in given.items() if v is not None},
        reward_url=args.reward_url,
        dynamic_sampling=args.dynamic_sampling,
        python=args.python,
        extra=tuple(args.set or ()),
        cpu=args.cpu,
    )


def _launch(args: argparse.Namespace, cfg: Config) -> int:
    cmd = argv(args.algorithm, _launch_params(args, cfg), torchrun=args.torchrun)
    if args.print:
        print(command_line(cmd))
        return 0
    if not Path(args.data_dir or train_dir(Workspace(cfg.workspace), args.domain)).is_dir():
        raise TrainError(f"no training data for {args.domain}; run: prore train export {args.domain}",
                         code="no_train_data")  # fmt: skip
    os.execvp(cmd[0], cmd)  # the trainer replaces this process: its exit code is the command's


def register_train(sub: Any) -> Any:
    """Add ``prore train export``, ``launch`` and ``from-verl``; returns the group's sub-parsers for more actions."""
    p = sub.add_parser(
        "train",
        help="export training data and launch verl training (SFT, GRPO, DAPO)",
        description="Training data from a benchmark, the verl commands that train the planner on it in a "
        "cluster (export, launch; hyperparameters from rl/verl/recipes/defaults.yaml, the paper's), and "
        "training a small planner on this machine with TRL (sft, grpo, dapo, plot).",
    )
    # No fixed metavar: argparse lists every action, including those rl.train adds (sft, grpo, dapo, plot).
    actions = p.add_subparsers(dest="train_action", required=True)
    e = actions.add_parser(
        "export",
        help="write verl's RL and SFT parquet from a benchmark",
        description="Write rl/{train,val,test,ood}.parquet (prompt, data_source, ability, reward_model, "
        "extra_info) and sft/{train,val}.parquet (messages) under <workspace>/train/<domain>.",
    )
    e.add_argument("domain", help="corpus domain: " + " or ".join(DOMAINS))
    e.add_argument("--profile", choices=PROFILES, default=None,
                   help="prompt profile: full (every rule, for Qwen3-4B/8B; the default), short, or compact (the "
                   "local planners' default); it must be the one the trained model reads")
    e.add_argument("--planner", metavar="DIR",
                   help="build every prompt as this planner's card says (RL after SFT): its profile, and its "
                   "exemplar index and k when it names one")
    e.add_argument("--val-fraction", type=float, default=ExportConfig.val_fraction, metavar="F",
                   help=f"share of the train split held out for validation (default {ExportConfig.val_fraction})")
    e.add_argument("--exemplars", type=int, default=0, metavar="K",
                   help="K exemplars per prompt from a new index of the export's train rows (serving.exemplars), "
                   "written beside the parquet; 0: none (default)")  # fmt: skip
    e.set_defaults(handler=_export)

    d = LaunchParams()
    x = actions.add_parser(
        "launch",
        help="run (or --print) the verl command of a recipe",
        description="The entrypoint and Hydra overrides a Ray job runs for a recipe. GRPO and DAPO run "
        "verl.trainer.main_ppo; SFT runs verl.trainer.sft_trainer_ray (or, with --torchrun, "
        "verl.trainer.sft_trainer on one machine).",
    )
    x.add_argument("algorithm", choices=ALGORITHMS, help="recipe: " + ", ".join(ALGORITHMS))
    x.add_argument("--print", action="store_true", help="print the command as one shell-quoted line; run nothing")
    x.add_argument("--domain", default="ecommerce", help="benchmark whose export trains (default ecommerce)")
    x.add_argument("--model", help=f"policy model id or directory (default {d.model})")
    x.add_argument("--gpus-per-node", type=int, metavar="G", help=f"GPUs per node (default {d.n_gpus_per_node})")
    x.add_argument("--nodes", type=int, metavar="N", help=f"nodes (default {d.nnodes})")
    x.add_argument("--data-dir", metavar="DIR",
                   help="export directory as the workers see it (default: the workspace's export of --domain)")
    x.add_argument("--checkpoint-dir", metavar="DIR", help=f"checkpoint root (default {d.checkpoint_dir})")
    x.add_argument("--experiment", help="run name (default <domain>-<algorithm>)")
    x.add_argument("--rollout-tp", type=int, metavar="N", help=f"rollout tensor parallelism (default {d.rollout_tp})")
    x.add_argument("--rollout-engine", help=f"verl rollout engine (default {d.rollout_engine})")
    x.add_argument("--micro-batch", type=int, metavar="N", help=f"per-GPU micro-batch (default {d.micro_batch})")
    x.add_argument("--reward-url", metavar="URL",
                   help="reward service base URL (default: the workers' PRORE_REWARD_URL environment variable)")
    x.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO: verl's dynamic sampling (algorithm.filter_groups)")
    x.add_argument("--torchrun", action="store_true", help="SFT on one machine with torchrun instead of Ray")
    x.add_argument("--cpu", action="store_true",
                   help="GRPO/DAPO on CPU in local Ray with the project's verl plugin (rl.verl.cpu, in .venv-verl): "
                   "a transformers rollout, FSDP2 on gloo; for small models and smoke runs")
    x.add_argument("--python", default=d.python, help=f"interpreter of the entrypoint (default {d.python})")
    x.add_argument("--set", action="append", metavar="KEY=VALUE", help="one more Hydra override (repeatable)")
    x.set_defaults(handler=_launch)

    f = actions.add_parser(
        "from-verl",
        help="turn a verl checkpoint step into a planner directory (planner:PATH, prore serve)",
        description="Copy the actor's Hugging Face model of one verl checkpoint step (saved with hf_model in "
        "actor_rollout_ref.actor.checkpoint.save_contents) into a model directory, with the planner card of the "
        "model the run started from (prompt profile, exemplar index), the algorithm and the step.",
    )
    f.add_argument("checkpoint_dir", help="the run's verl checkpoint directory (trainer.default_local_dir)")
    f.add_argument("--init", required=True, metavar="DIR", help="the model the verl run started from (its card)")
    f.add_argument("--out", required=True, metavar="DIR", help="the planner directory to write (replaced whole)")
    f.add_argument("--step", type=int, help="checkpoint step (default: the newest verl recorded)")
    f.add_argument("--algorithm", choices=("grpo", "dapo"), default="grpo", help="the recipe the run used (default grpo)")
    f.set_defaults(handler=_from_verl)
    return actions
