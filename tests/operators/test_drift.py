"""The operator and the product cannot drift: the RayJob's entrypoint is a command the real ``prore``
parses, its ``--set`` keys are the recipes' keys, the checkpoint layout is the recipes', and the chart's
CRDs are what the typed definitions generate."""

from __future__ import annotations

import contextlib
import io
import shlex

import pytest
import yaml

from operators import crdgen
from operators.api import KINDS
from operators.settings import OperatorSettings
from operators.training import (
    FINAL_LINK,
    RL_KEYS,
    SFT_KEYS,
    entrypoint,
    experiment_dir,
    from_verl_argv,
    launch_argv,
    model_argument,
    spec_of,
)
from tests.operators.schemas import DATA, PROJECT_CRDS, REPO, UPSTREAM_CRDS

recipes = pytest.importorskip("rl.verl.recipes")
cli = pytest.importorskip("prore.cli")

JOBS = [REPO / "examples" / "k8s" / "grpo-ecommerce.yaml", REPO / "examples" / "k8s" / "dapo-email.yaml",
        REPO / "examples" / "k8s" / "dapo-from-planner.yaml", DATA / "sft-ecommerce.yaml"]  # fmt: skip


def test_generated_crds_are_not_stale() -> None:
    assert crdgen.stale() == [], "run: python -m operators.crdgen"
    assert sorted(p.name for p in PROJECT_CRDS.glob("*.yaml")) == sorted(crdgen.filename(k) for k in KINDS)


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.stem)
def test_the_entrypoint_is_what_prore_train_launch_prints(path: object) -> None:
    job = yaml.safe_load(path.read_text())  # type: ignore[attr-defined]
    spec = spec_of(job)
    argv = launch_argv(job, spec, OperatorSettings())
    assert argv[0] == "prore"
    assert shlex.join(argv) in entrypoint(job, spec, OperatorSettings())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main([*argv[1:], "--print"]) == 0
    verl = shlex.split(out.getvalue())
    assert verl[1:3] == [
        "-m",
        "verl.trainer.main_ppo" if spec.algorithm != "sft" else "verl.trainer.sft_trainer_ray",
    ]
    assert f"trainer.nnodes={spec.resources.nodes}" in verl
    resolved = recipes.resolve(
        spec.algorithm, {"checkpoint_dir": "/mnt/checkpoints", "experiment": job["metadata"]["name"]}
    )
    assert resolved["trainer.default_local_dir"] == f"/mnt/checkpoints/{experiment_dir(job, spec)}"


def test_a_promotion_with_the_planner_card_ends_with_from_verl_on_the_recipes_checkpoints() -> None:
    """The step after training is ``prore train from-verl`` as the real parser reads it: verl's checkpoint
    directory of the run (the recipe's ``trainer.default_local_dir``), the model the run started from as
    ``--init``, and ``final`` beside the steps, which the PlannerService serves with its card."""
    job = yaml.safe_load((REPO / "examples" / "k8s" / "dapo-from-planner.yaml").read_text())
    spec, settings = spec_of(job), OperatorSettings()
    argv = from_verl_argv(job, spec, settings)
    assert entrypoint(job, spec, settings).endswith(" && " + shlex.join(argv))
    args = cli.build_parser().parse_args(argv[1:])
    assert args.handler.__name__ == "_from_verl"
    resolved = recipes.resolve(
        spec.algorithm, {"checkpoint_dir": settings.checkpoint_mount, "experiment": job["metadata"]["name"]}
    )
    assert args.checkpoint_dir == resolved["trainer.default_local_dir"]
    assert (args.init, args.algorithm) == (model_argument(spec, settings), spec.algorithm)
    assert args.out == f"{args.checkpoint_dir}/{FINAL_LINK}"


@pytest.mark.parametrize("algorithm", ["sft", "grpo", "dapo"])
def test_hyperparameter_keys_are_recipe_keys(algorithm: str) -> None:
    keys = SFT_KEYS if algorithm == "sft" else RL_KEYS
    recipe = recipes.recipe(algorithm)
    for hydra_keys in keys.values():
        for key in hydra_keys:
            assert key in recipe, f"{key} is not a key of the {algorithm} recipe"


def test_upstream_crds_are_the_readme_releases() -> None:
    readme = (UPSTREAM_CRDS / "README.md").read_text()
    for path in UPSTREAM_CRDS.glob("*.yaml"):
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{path.name}`"))
        assert row.rstrip(" |").endswith(str(path.stat().st_size)), path.name
