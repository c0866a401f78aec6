"""GRPO and DAPO through TRL on the layered reward: in-process, and through the reward service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import main
from rl.reward import RewardScorer
from rl.reward.service import create_app
from rl.reward.settings import ServiceSettings
from rl.train.data import load_instances, rl_row, split_train_val
from rl.train.logs import read_metrics
from rl.train.prompt_filter import (
    FILTER_FILE,
    FilterStats,
    filter_key,
    filter_rows,
    pool_digest,
    record_filter,
    row_key,
    saved_filter,
)
from rl.train.rewards import LAYER_NAMES, LayeredReward, in_process, layers
from rl.train.run import native_bf16
from serving.http.server import ServerThread
from tests.rl.train_support import train_tiny_sft

RL_FLAGS = ["--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "24",
            "--limit", "8", "--logging-steps", "1", "--save-steps", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def sft_model(train_bench: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_sft(train_bench, tmp_path_factory.mktemp("grpo-init") / "sft", 3)


def test_the_four_layers_sum_to_the_layered_reward() -> None:
    calls = []

    def score(items: list[dict[str, object]]) -> list[dict[str, float]]:
        calls.append(len(items))
        return [
            {"s_f": 1.0, "s_e": 1.0, "s_r": 0.0, "s_l": 1.0},
            {"s_f": 1.0, "s_e": 1.0, "s_r": 1.0, "s_l": 0.5},
        ]

    reward = LayeredReward(score, "hit1")
    kwargs = {"domain": ["email", "email"], "gold_id": ["E1", "E2"], "relevant": [[], []]}
    completions = [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]]
    per_layer = [f(prompts=None, completions=completions, **kwargs) for f in reward.funcs()]
    assert [f.__name__ for f in reward.funcs()] == list(LAYER_NAMES)
    assert [sum(col) for col in zip(*per_layer, strict=True)] == [2.0, 3.5]  # R = S_f + S_f S_e + ...
    assert calls == [2], "one scoring call per batch, shared by the four functions"
    assert layers({"s_f": 0.0, "s_e": 1.0, "s_r": 1.0, "s_l": 1.0}) == (0.0, 0.0, 0.0, 0.0)
    gated = LayeredReward(score, "hit1", execution_credit=0.0)  # a wrong program that runs earns S_f alone
    per_layer = [f(prompts=None, completions=completions, **kwargs) for f in gated.funcs()]
    assert [sum(col) for col in zip(*per_layer, strict=True)] == [1.0, 3.5]


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])
def test_rl_logs_every_reward_term_kl_and_clipping(small_index_cfg: Config, train_bench: Workspace,
                                                    sft_model: Path, tmp_path: Path, algorithm: str) -> None:  # fmt: skip
    out = tmp_path / algorithm
    offset = {"grpo": 0, "dapo": 8}[algorithm]  # DAPO on requests the SFT model's first 8 did not include
    # DAPO gated, in fp32 and with gradient checkpointing (each off in GRPO's run: TRL turns both on by default)
    credit = {
        "grpo": [],
        "dapo": ["--execution-credit", "0", "--precision", "fp32", "--gradient-checkpointing"],
    }[algorithm]
    rc = main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", algorithm,
               "--init", str(sft_model), "--bench", str(train_bench.root), "--domain", "ecommerce", *RL_FLAGS,
               "--offset", str(offset), "--out", str(out), *credit])  # fmt: skip
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["algorithm"] == algorithm
    assert summary["precision"] == ("bf16" if algorithm == "grpo" and native_bf16() else "fp32")
    assert summary["gradient_checkpointing"] is (algorithm == "dapo")
    steps = [r for r in read_metrics(out) if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for name in LAYER_NAMES:
            assert 0.0 <= r[f"rewards/{name}/mean"] <= 1.0
        assert r["reward"] == pytest.approx(sum(r[f"rewards/{n}/mean"] for n in LAYER_NAMES), abs=1e-5)
        assert "kl" in r and "clip_ratio/region_mean" in r and "completions/mean_length" in r
    run = json.loads((out / "run.json").read_text())
    expected = {"grpo": ("grpo", 0.2, 0.2), "dapo": ("dapo", 0.1, 0.28)}[algorithm]
    assert (run["params"]["loss_type"], run["params"]["epsilon"], run["params"]["epsilon_high"]) == expected
    assert run["params"]["beta"] == 0.001
    assert (run["limit"], run["offset"]) == (8, offset)
    assert run["params"]["execution_credit"] == {"grpo": 1.0, "dapo": 0.0}[algorithm]
    assert (
        json.loads((out / "final" / "planner.json").read_text())["execution_credit"]
        == run["params"]["execution_credit"]
    )


def test_grpo_scores_through_the_reward_service(small_index_cfg: Config, train_bench: Workspace,
                                                sft_model: Path, tmp_path: Path) -> None:  # fmt: skip
    scorer = RewardScorer.open(small_index_cfg, ["ecommerce"])
    server = ServerThread(create_app(ServiceSettings(domains=("ecommerce",)), scorer), port=0).start()
    try:
        out = tmp_path / "remote"
        rc = main(["--workspace", str(train_bench.root), "train", "grpo", "--init", str(sft_model),
                   "--domain", "ecommerce", "--reward-url", server.url, *RL_FLAGS, "--out", str(out)])  # fmt: skip
        assert rc == 0
    finally:
        server.stop()
        scorer.close()
    steps = [r for r in read_metrics(out) if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["rewards/format/mean"] >= r["rewards/execution/mean"] for r in steps)


def test_num_iterations_reuses_each_generation_batch(small_index_cfg: Config, train_bench: Workspace,
                                                     sft_model: Path, tmp_path: Path) -> None:  # fmt: skip
    """With TRL's mu = 2 the second optimizer step trains on the first step's completions again (the
    policy ratio then differs from 1, so the clip can act); the recipe records mu."""
    out = tmp_path / "mu2"
    rc = main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", "dapo",
               "--init", str(sft_model), "--bench", str(train_bench.root), "--domain", "ecommerce", *RL_FLAGS,
               "--num-iterations", "2", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert json.loads((out / "run.json").read_text())["params"]["num_iterations"] == 2
    first, second = [r for r in read_metrics(out) if "loss" in r]
    assert (first["step"], second["step"]) == (1, 2)
    assert "reward" in first and "completions/mean_length" in first  # step 1 generated and scored a batch
    assert "reward" not in second and "completions/mean_length" not in second  # step 2 generated nothing
    assert "clip_ratio/region_mean" in second and "kl" in second  # and trained on the reused batch


def test_prompt_filter_keeps_the_groups_whose_rewards_differ(small_index_cfg: Config, train_bench: Workspace,
                                                            tmp_path: Path) -> None:  # fmt: skip
    """Scored by the real reward on the engine: a group of gold programs is solved, a group of junk
    unsolved, and the mixed groups are kept; a group whose only difference is a wrong program that
    executes is kept on reward but not on accuracy. The outcome is recorded and read back for the same pool."""
    instances = split_train_val(load_instances(train_bench, ["ecommerce"], "train"))[0][:4]
    rows = [rl_row(i, "compact") for i in instances]
    gold = [i.program for i in instances]
    completions = [
        [gold[0], gold[0]],
        [gold[1], "not a program"],
        ["{}", "not a program"],
        [gold[0], "not a program"],
    ]
    scorer = RewardScorer.open(small_index_cfg, ["ecommerce"])
    try:
        reward = LayeredReward(in_process(scorer), "hit1")
        other = reward.layers([gold[0]], {key: [rows[3][key]] for key in ("domain", "gold_id", "relevant")})[
            0
        ]
        kept, stats = filter_rows(rows, completions, reward.layers, temperature=1.0)
        on_accuracy, by_accuracy = filter_rows(
            rows, completions, reward.layers, temperature=1.0, on="accuracy"
        )
    finally:
        scorer.close()
    assert tuple(other[:3]) == (1.0, 1.0, 0.0)  # another request's program: it executes and misses
    assert [r["qid"] for r in kept] == [rows[1]["qid"], rows[3]["qid"]]
    assert (stats.pool, stats.kept, stats.solved, stats.unsolved, stats.samples, stats.on) == (
        4,
        2,
        1,
        1,
        2,
        "reward",
    )
    assert stats.mean_reward == pytest.approx(
        (4 + 4 + 4 + 0 + 0 + 0 + 2 + 0) / 8, abs=0.05
    )  # gold: S_l near 1
    assert [r["qid"] for r in on_accuracy] == [rows[1]["qid"]]
    assert (by_accuracy.kept, by_accuracy.solved, by_accuracy.unsolved, by_accuracy.on) == (
        1,
        1,
        2,
        "accuracy",
    )
    key = {"pool": pool_digest(rows), "samples": 2}
    record_filter(tmp_path, key, kept, stats)
    assert saved_filter(tmp_path, key) == {row_key(rows[1]), row_key(rows[3])}
    assert saved_filter(tmp_path, {**key, "samples": 4}) is None  # another sampling: filter again
    assert json.loads((tmp_path / FILTER_FILE).read_text())["stats"]["kept"] == 2


@pytest.mark.slow
def test_filtered_rl_samples_the_initial_model_and_refuses_an_empty_pool(small_index_cfg: Config,
                                                                         train_bench: Workspace, sft_model: Path,
                                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """`--filter-prompts` samples G completions per prompt from --init through vLLM and scores them with
    the run's reward. The three-step planner writes no program that earns a reward, so no group differs
    and the run stops with one typed line before any training step, its filter recorded."""
    out = tmp_path / "filtered"
    rc = main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", "grpo",
               "--init", str(sft_model), "--bench", str(train_bench.root), "--domain", "ecommerce", *RL_FLAGS,
               "--filter-prompts", "--out", str(out)])  # fmt: skip
    assert rc == 2
    assert "error train_filter: the prompt filter kept 0 prompts" in capsys.readouterr().err
    saved = json.loads((out / FILTER_FILE).read_text())
    assert saved["stats"]["pool"] == 8 and saved["stats"]["samples"] == 2
    assert saved["stats"]["kept"] + saved["stats"]["solved"] + saved["stats"]["unsolved"] == 8
    assert saved["key"]["init"] == str(sft_model.resolve()) and not saved["kept"]
    assert not list(out.glob("checkpoint-*")) and not (out / "final").exists()


def test_filter_needs_an_initial_model(small_index_cfg: Config, train_bench: Workspace, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    rc = main(["--workspace", str(small_index_cfg.workspace), "train", "grpo", "--bench", str(train_bench.root),
               "--domain", "ecommerce", "--size", "xs", *RL_FLAGS, "--filter-prompts", "--out", str(tmp_path / "x")])  # fmt: skip
    assert (
        rc == 2
        and "error train_filter: --filter-prompts samples the initial model" in capsys.readouterr().err
    )


def test_filtered_rl_trains_on_the_kept_prompts_and_reuses_its_filter(small_index_cfg: Config,
                                                                      train_bench: Workspace, sft_model: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A run that finds its filter recorded for the same model, pool and sampling (a resumed run) samples
    nothing again and trains on the kept prompts only."""
    out = tmp_path / "kept"
    out.mkdir()
    rows = [
        rl_row(i, "compact")
        for i in split_train_val(load_instances(train_bench, ["ecommerce"], "train"))[0][:8]
    ]
    key = filter_key(sft_model, rows, samples=2, temperature=1.0, max_tokens=24, target="hit1", on="accuracy")
    stats = FilterStats(pool=8, kept=3, solved=0, unsolved=5, samples=2, temperature=1.0, on="accuracy",
                        mean_reward=1.0, seconds=0.0)  # fmt: skip
    record_filter(out, key, rows[2:5], stats)
    capsys.readouterr()
    rc = main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", "grpo",
               "--init", str(sft_model), "--bench", str(train_bench.root), "--domain", "ecommerce", *RL_FLAGS,
               "--filter-prompts", "--filter-on", "accuracy", "--out", str(out)])  # fmt: skip
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompts"] == 3 and summary["steps"] == 2
    assert "prompt filter (accuracy): kept 3 of 8 prompts, as recorded in" in capsys.readouterr().out
    params = json.loads((out / "run.json").read_text())["params"]
    assert params["filter_prompts"] is True and params["filter_on"] == "accuracy"
