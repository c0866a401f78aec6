"""GRPO and DAPO through TRL on the layered reward: in-process, and through the reward service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import main
from rl.reward import RewardScorer
from rl.reward.service import ServerThread, ServiceSettings, create_app
from rl.train.logs import read_metrics
from rl.train.rewards import LAYER_NAMES, LayeredReward, layers
from tests.rl.train_support import TINY, train_bench  # noqa: F401  (fixture)

RL_FLAGS = ["--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "24",
            "--limit", "8", "--logging-steps", "1", "--save-steps", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def sft_model(train_bench: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("grpo-init") / "sft"
    assert main(["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "3", "--out", str(out)]) == 0
    return out / "final"


def test_the_four_layers_sum_to_the_layered_reward() -> None:
    calls = []

    def score(items: list[dict[str, object]]) -> list[dict[str, float]]:
        calls.append(len(items))
        return [{"s_f": 1.0, "s_e": 1.0, "s_r": 0.0, "s_l": 1.0}, {"s_f": 1.0, "s_e": 1.0, "s_r": 1.0, "s_l": 0.5}]

    reward = LayeredReward(score, "hit1")
    kwargs = {"domain": ["email", "email"], "gold_id": ["E1", "E2"], "relevant": [[], []]}
    completions = [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]]
    per_layer = [f(prompts=None, completions=completions, **kwargs) for f in reward.funcs()]
    assert [f.__name__ for f in reward.funcs()] == list(LAYER_NAMES)
    assert [sum(col) for col in zip(*per_layer, strict=True)] == [2.0, 3.5]  # R = S_f + S_f S_e + ...
    assert calls == [2], "one scoring call per batch, shared by the four functions"
    assert layers({"s_f": 0.0, "s_e": 1.0, "s_r": 1.0, "s_l": 1.0}) == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])
def test_rl_logs_every_reward_term_kl_and_clipping(small_index_cfg: Config, train_bench: Workspace,  # noqa: F811
                                                    sft_model: Path, tmp_path: Path, algorithm: str) -> None:  # fmt: skip
    out = tmp_path / algorithm
    rc = main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", algorithm,
               "--init", str(sft_model), "--bench", str(train_bench.root), "--domain", "ecommerce", *RL_FLAGS,
               "--out", str(out)])  # fmt: skip
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["algorithm"] == algorithm
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
    assert (out / "final" / "planner.json").is_file()


def test_grpo_scores_through_the_reward_service(small_index_cfg: Config, train_bench: Workspace,  # noqa: F811
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


def test_num_iterations_reuses_each_generation_batch(small_index_cfg: Config, train_bench: Workspace,  # noqa: F811
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
