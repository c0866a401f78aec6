"""``prore train export`` on a small synthesized benchmark, and ``prore train launch --print``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets import load_split
from rl.errors import TrainError
from rl.prompt import messages
from rl.verl.export import ExportConfig, domain_of, export, is_val, train_dir
from rl.verl.launch import LaunchParams, argv, command_line
from rl.verl.recipes import overrides, recipe
from serving.engine import Engine
from tests.rl.verl_support import SIZES, synth_bench

DOMAINS = ("ecommerce", "email")


@pytest.fixture(scope="module")
def bench(small_index_cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("export")
    for d in DOMAINS:
        engine = Engine.open(small_index_cfg, d)
        try:
            synth_bench(small_index_cfg, d, engine, root)
        finally:
            engine.close()
    yield Workspace(root)


@pytest.mark.parametrize("domain", DOMAINS)
def test_rl_rows_carry_prompt_ground_truth_and_instance_id(bench: Workspace, domain: str) -> None:
    manifest = export(bench, domain)
    out = train_dir(bench, domain)
    train = load_split(bench, domain, "train")
    by_qid = {i.qid: i for s in ("train", "test", "ood") for i in load_split(bench, domain, s)}
    seen: list[str] = []
    for part in ("train", "val", "test", "ood"):
        rows = pq.read_table(out / "rl" / f"{part}.parquet").to_pylist()
        assert len(rows) == manifest["rows"][part]
        for n, row in enumerate(rows):
            inst = by_qid[row["extra_info"]["instance_id"]]
            assert row["data_source"] == f"proretrieval/{domain}" and domain_of(row["data_source"]) == domain
            assert row["ability"] == "retrieval"
            assert row["reward_model"] == {"style": "rule", "ground_truth": inst.gold_id}
            assert row["prompt"] == messages(domain, inst.nl)
            assert row["extra_info"] == {"instance_id": inst.qid, "split": part, "index": n,
                                         "level": inst.level, "domain": domain}  # fmt: skip
            seen.append(inst.qid)
    assert sorted(seen) == sorted(by_qid), "every instance is exported exactly once"
    assert manifest["rows"]["train"] + manifest["rows"]["val"] == len(train) == SIZES["train"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_sft_rows_are_the_prompt_and_the_gold_program(bench: Workspace, domain: str) -> None:
    export(bench, domain, ExportConfig(profile="short", val_fraction=0.25))
    out = train_dir(bench, domain)
    by_qid = {i.qid: i for i in load_split(bench, domain, "train")}
    val = {q for q in by_qid if is_val(q, 0.25)}
    for part, qids in (("train", set(by_qid) - val), ("val", val)):
        rows = pq.read_table(out / "sft" / f"{part}.parquet").to_pylist()
        got = []
        for row in rows:
            *prompt, answer = row["messages"]
            assert answer["role"] == "assistant"
            inst = next(i for i in by_qid.values() if i.program == answer["content"] and
                        messages(domain, i.nl, profile="short") == prompt)  # fmt: skip
            got.append(inst.qid)
        assert sorted(got) == sorted(qids)
    assert json.loads((out / "manifest.json").read_text())["profile"] == "short"


def test_the_validation_hold_out_does_not_depend_on_order() -> None:
    qids = [f"q{i}" for i in range(2000)]
    held = [q for q in qids if is_val(q, 0.05)]
    assert held == [q for q in reversed(qids) if is_val(q, 0.05)][::-1]
    assert 60 < len(held) < 140


def test_cli_export_and_its_errors(bench: Workspace, small_index_cfg: Config, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:  # fmt: skip
    assert main(["--workspace", str(bench.root), "train", "export", "email", "--profile", "short"]) == 0
    assert "written to" in capsys.readouterr().out
    assert main(["--workspace", str(tmp_path), "train", "export", "email"]) == 2
    assert capsys.readouterr().err.startswith("error no_bench: no email benchmark")
    assert main(["--workspace", str(bench.root), "train", "export", "email", "--val-fraction", "1.5"]) == 2
    assert "error train_val: val_fraction must be between 0 and 1" in capsys.readouterr().err


def test_cli_export_builds_the_prompt_a_planners_card_names(bench: Workspace, small_index_cfg: Config,
                                                              capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:  # fmt: skip
    """RL after SFT: ``--planner DIR`` takes the profile from the card, so verl's prompts are the SFT model's."""
    planner = tmp_path / "planner"
    planner.mkdir()
    (planner / "planner.json").write_text(
        json.dumps({"profile": "compact", "domains": ["email"], "algorithm": "sft"})
    )
    assert main(["--workspace", str(bench.root), "train", "export", "email", "--planner", str(planner)]) == 0
    assert "(compact prompt)" in capsys.readouterr().out
    assert main(["--workspace", str(bench.root), "train", "export", "email", "--planner", str(planner),
                 "--profile", "short"]) == 2  # fmt: skip
    assert "error train_profile: give --profile or --planner" in capsys.readouterr().err


def test_launch_print_is_the_argv_of_the_recipe(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--workspace", str(tmp_path), "train", "launch", "dapo", "--print", "--model", "/m/qwen3 8b",
                 "--gpus-per-node", "4", "--nodes", "2", "--reward-url", "http://reward:8300",
                 "--dynamic-sampling", "--data-dir", "/data/x"]) == 0  # fmt: skip
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    p = LaunchParams(model="/m/qwen3 8b", n_gpus_per_node=4, nnodes=2, data_dir="/data/x",
                     experiment="ecommerce-dapo", reward_url="http://reward:8300", dynamic_sampling=True)  # fmt: skip
    assert shlex.split(line) == argv("dapo", p)
    assert command_line(argv("dapo", p)) == line
    words = shlex.split(line)
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    for o in ("trainer.n_gpus_per_node=4", "trainer.nnodes=2", "actor_rollout_ref.model.path='/m/qwen3 8b'",
              "actor_rollout_ref.actor.clip_ratio_low=0.1", "actor_rollout_ref.actor.clip_ratio_high=0.28",
              "actor_rollout_ref.actor.loss_agg_mode=token-mean", "algorithm.filter_groups.enable=true",
              "data.train_files=/data/x/rl/train.parquet", "trainer.resume_mode=auto",
              "+reward.custom_reward_function.reward_kwargs.reward_url=http://reward:8300"):  # fmt: skip
        assert o in words, o


def test_launch_cpu_is_the_recipe_with_the_cpu_plugin_and_its_overrides(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:  # fmt: skip
    assert main(["--workspace", str(tmp_path), "train", "launch", "grpo", "--print", "--cpu", "--model", "/m/tiny",
                 "--data-dir", "/data/x", "--set", "data.train_batch_size=4"]) == 0  # fmt: skip
    words = shlex.split(capsys.readouterr().out.strip())
    assert words[:5] == [
        "env",
        "VERL_USE_EXTERNAL_MODULES=rl.verl.cpu",
        "python3",
        "-m",
        "verl.trainer.main_ppo",
    ]
    for o in ("trainer.device=cpu", "actor_rollout_ref.rollout.name=hf", "trainer.n_gpus_per_node=1",
              "+ray_kwargs.ray_init.num_gpus=1", "actor_rollout_ref.actor.strategy=fsdp2",
              "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=rl.verl.cpu"):  # fmt: skip
        assert o in words, o
    # the recipe's rollout engine comes first and the CPU one after it; --set comes last (it wins)
    assert words.index("actor_rollout_ref.rollout.name=vllm") < words.index(
        "actor_rollout_ref.rollout.name=hf"
    )
    assert words[-1] == "data.train_batch_size=4"
    assert main(["--workspace", str(tmp_path), "train", "launch", "sft", "--print", "--cpu"]) == 2
    assert "error train_param: --cpu runs GRPO and DAPO" in capsys.readouterr().err


def test_recipes_carry_the_papers_numbers() -> None:
    grpo, dapo, sft = recipe("grpo"), recipe("dapo"), recipe("sft")
    assert (grpo["actor_rollout_ref.rollout.n"], grpo["data.train_batch_size"]) == (4, 32)
    assert (grpo["actor_rollout_ref.actor.optim.lr"], grpo["actor_rollout_ref.actor.kl_loss_coef"]) == (
        1e-6,
        0.001,
    )
    assert grpo["actor_rollout_ref.actor.use_kl_loss"] is True
    assert (
        grpo["actor_rollout_ref.actor.clip_ratio_low"],
        grpo["actor_rollout_ref.actor.clip_ratio_high"],
    ) == (0.2, 0.2)
    assert (
        dapo["actor_rollout_ref.actor.clip_ratio_low"],
        dapo["actor_rollout_ref.actor.clip_ratio_high"],
    ) == (0.1, 0.28)
    assert dapo["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert (sft["trainer.total_epochs"], sft["optim.lr"], sft["data.train_batch_size"]) == (3, 5e-5, 64)
    for r in (grpo, dapo, sft):
        assert r["trainer.resume_mode"] == "auto"


def test_bad_launch_options_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ws = ["--workspace", str(tmp_path)]
    assert main([*ws, "train", "launch", "grpo", "--print", "--dynamic-sampling"]) == 2
    assert (
        "error train_recipe: dynamic sampling (algorithm.filter_groups) belongs to the DAPO recipe"
        in capsys.readouterr().err
    )
    assert main([*ws, "train", "launch", "sft", "--print", "--nodes", "0"]) == 2
    assert "error train_param: nnodes must be a positive integer, got 0" in capsys.readouterr().err
    assert main([*ws, "train", "launch", "sft", "--print", "--reward-url", "http://x"]) == 2
    assert "error train_param: the SFT recipe has no reward" in capsys.readouterr().err
    with pytest.raises(TrainError, match="unknown launch parameter"):
        overrides("grpo", {"gpus": 3})
