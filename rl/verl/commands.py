"""``prore train``: datasets and launch commands for training the planner.

    prore train export {ecommerce|email} [--profile full|short|compact | --planner DIR] [--val-fraction F] [--exemplars K]
    prore train launch {sft|grpo|dapo} [--domain D] [--model M] [--gpus-per-node G] [--nodes N] ... [--print]

The group is registered by :func:`register_train`; later trainers add their actions to the parser it returns.
The flags of ``launch`` and ``export`` are built from the fields of :class:`~rl.verl.launch.LaunchParams` and
:class:`~rl.verl.export.ExportConfig` (:mod:`core.flags`), laid over the defaults the command computes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from core.flags import Flag, Flags
from indexing.config import Config
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.errors import TrainError
from rl.prompt import Profile
from rl.verl.export import ExportConfig, export, train_dir
from rl.verl.launch import LaunchParams, argv, command_line
from rl.verl.recipes import ALGORITHMS

EXPORT_FLAGS: Flags[ExportConfig] = Flags(ExportConfig, "profile", Flag("val_fraction", metavar="F"),
                                           Flag("exemplars", metavar="K"))  # fmt: skip
"""``prore train export``'s flags of :class:`~rl.verl.export.ExportConfig`'s fields."""


def export_config(args: argparse.Namespace, cfg: Config) -> ExportConfig:
    """What ``prore train export`` writes: ``--planner``'s card (its profile and exemplar index) or the defaults,
    with the flags given over them."""
    given = EXPORT_FLAGS.given(args)
    profile: Profile = "full"
    exemplars_from: Path | None = None
    if args.planner is not None:  # the prompt the planner was trained on: its card's profile and exemplars
        from serving.exemplars import card_exemplars
        from serving.prompt import card_profile, read_card

        if "profile" in given:
            raise TrainError(
                "give --profile or --planner (whose card names the profile), not both", code="train_profile"
            )
        card = read_card(args.planner)
        profile = card_profile(args.planner)
        exemplars_from = Path(args.planner) if card_exemplars(card) is not None else None
    base = ExportConfig(profile=profile, exemplars_from=exemplars_from, embedder=cfg.embedder)
    return EXPORT_FLAGS.over(base, args)


def _export(args: argparse.Namespace, cfg: Config) -> int:
    ws = Workspace(cfg.workspace)
    config = export_config(args, cfg)
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


LAUNCH_FLAGS: Flags[LaunchParams] = Flags(
    LaunchParams,
    "model",
    Flag("n_gpus_per_node", "--gpus-per-node", metavar="G"),
    Flag("nnodes", "--nodes", metavar="N"),
    Flag("data_dir", metavar="DIR", default="the workspace's export of --domain"),
    Flag("checkpoint_dir", metavar="DIR"),
    Flag("experiment", default="<domain>-<algorithm>"),
    Flag("rollout_tp", metavar="N"),
    "rollout_engine",
    Flag("micro_batch", metavar="N"),
    Flag("reward_url", metavar="URL"),
    "dynamic_sampling",
    "cpu",
    "python",
    Flag("extra", "--set", metavar="KEY=VALUE"),
)  # fmt: skip
"""``prore train launch``'s flags of :class:`~rl.verl.launch.LaunchParams`'s fields."""


def _launch_params(args: argparse.Namespace, cfg: Config) -> LaunchParams:
    """The launch's parameters: the defaults file's, the export of ``--domain`` as the data and
    ``<domain>-<algorithm>`` as the run name, one trainer process per node with ``--cpu``, then the flags given."""
    schema_for(args.domain)
    data_dir = str(train_dir(Workspace(cfg.workspace), args.domain).resolve())
    base = LaunchParams(data_dir=data_dir, experiment=f"{args.domain}-{args.algorithm}")
    if LAUNCH_FLAGS.given(args).get("cpu"):  # one trainer process per node unless told otherwise
        base = dataclasses.replace(base, n_gpus_per_node=1)
    return LAUNCH_FLAGS.over(base, args)


def _launch(args: argparse.Namespace, cfg: Config) -> int:
    params = _launch_params(args, cfg)
    cmd = argv(args.algorithm, params, torchrun=args.torchrun)
    if args.print:
        print(command_line(cmd))
        return 0
    if not Path(params.data_dir).is_dir():
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
    EXPORT_FLAGS.add_to(e)
    e.add_argument(
        "--planner",
        metavar="DIR",
        help="build every prompt as this planner's card says (RL after SFT): its profile, and its "
        "exemplar index and k when it names one",
    )
    e.set_defaults(handler=_export)

    x = actions.add_parser(
        "launch",
        help="run (or --print) the verl command of a recipe",
        description="The entrypoint and Hydra overrides a Ray job runs for a recipe. GRPO and DAPO run "
        "verl.trainer.main_ppo; SFT runs verl.trainer.sft_trainer_ray (or, with --torchrun, "
        "verl.trainer.sft_trainer on one machine).",
    )
    x.add_argument("algorithm", choices=ALGORITHMS, help="recipe: " + ", ".join(ALGORITHMS))
    x.add_argument(
        "--print", action="store_true", help="print the command as one shell-quoted line; run nothing"
    )
    x.add_argument("--domain", default="ecommerce", help="benchmark whose export trains (default ecommerce)")
    LAUNCH_FLAGS.add_to(x)
    x.add_argument("--torchrun", action="store_true", help="SFT on one machine with torchrun instead of Ray")
    x.set_defaults(handler=_launch)

    f = actions.add_parser(
        "from-verl",
        help="turn a verl checkpoint step into a planner directory (planner:PATH, prore serve)",
        description="Copy the actor's Hugging Face model of one verl checkpoint step (saved with hf_model in "
        "actor_rollout_ref.actor.checkpoint.save_contents) into a model directory, with the planner card of the "
        "model the run started from (prompt profile, exemplar index), the algorithm and the step.",
    )
    f.add_argument("checkpoint_dir", help="the run's verl checkpoint directory (trainer.default_local_dir)")
    f.add_argument(
        "--init", required=True, metavar="DIR", help="the model the verl run started from (its card)"
    )
    f.add_argument(
        "--out", required=True, metavar="DIR", help="the planner directory to write (replaced whole)"
    )
    f.add_argument("--step", type=int, help="checkpoint step (default: the newest verl recorded)")
    f.add_argument(
        "--algorithm", choices=("grpo", "dapo"), default="grpo", help="the recipe the run used (default grpo)"
    )
    f.set_defaults(handler=_from_verl)
    return actions
