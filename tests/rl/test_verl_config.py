"""The recipes against verl 0.9.1's own code: Hydra composes them with verl's config files, verl's
validation accepts them, every key lands where the recipe says, and verl's loaders read the export.

Runs in .venv-verl (``make test-verl``); skipped elsewhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rl.verl_support import require_verl

verl = require_verl()

from omegaconf import OmegaConf  # noqa: E402

from rl.verl import reward_fn  # noqa: E402
from rl.verl.launch import LaunchParams, argv  # noqa: E402
from rl.verl.recipes import REWARD_URL_KEY, resolve  # noqa: E402
from tests.rl.verl_support import ServedExport, compose_argv, tiny_qwen3  # noqa: E402

CASES = [("grpo", {}), ("dapo", {}), ("dapo", {"dynamic_sampling": True}), ("sft", {})]


def _params(**kw: Any) -> LaunchParams:
    base: dict[str, Any] = {"model": "/models/qwen3-4b", "n_gpus_per_node": 8, "nnodes": 2, "data_dir": "/data/ecommerce",
                            "checkpoint_dir": "/ckpt", "experiment": "exp", "reward_url": "http://reward:8300"}  # fmt: skip
    return LaunchParams(**{**base, **kw})


@pytest.mark.parametrize(("algorithm", "options"), CASES)
def test_every_recipe_key_lands_where_intended(algorithm: str, options: dict[str, Any]) -> None:
    p = _params(**options)
    cmd = argv(algorithm, LaunchParams(**{**p.__dict__, "reward_url": None}) if algorithm == "sft" else p)
    cfg = compose_argv(cmd)
    keys = resolve(algorithm, p.recipe_params(), dynamic_sampling=p.dynamic_sampling)
    for key, want in keys.items():
        got = OmegaConf.select(cfg, key, throw_on_missing=True)
        got = OmegaConf.to_object(got) if OmegaConf.is_config(got) else got
        assert got == want, (key, got, want)
    if algorithm != "sft":
        assert OmegaConf.select(cfg, REWARD_URL_KEY) == "http://reward:8300"


@pytest.mark.parametrize(("algorithm", "options"), [c for c in CASES if c[0] != "sft"])
def test_rl_recipes_pass_verls_validation_and_dataclasses(algorithm: str, options: dict[str, Any]) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = compose_argv(argv(algorithm, _params(**options)))
    assert need_reference_policy(cfg) and not need_critic(cfg)
    validate_config(cfg, use_reference_policy=True, use_critic=False)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (
        (0.1, 0.28) if algorithm == "dapo" else (0.2, 0.2)
    )
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.001 and actor.optim.lr == 1e-6
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert algo.adv_estimator == "grpo"
    assert bool(algo.filter_groups and algo.filter_groups.enable) is bool(options.get("dynamic_sampling"))
    # verl 0.9.1 cannot build RewardConfig from its own YAML (RewardManagerConfig.__post_init__ calls a
    # __post_init__ that BaseConfig lacks) and never does; its reward loop resolves the manager by name.
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    assert resolve_reward_manager_cls(cfg).__name__ == "NaiveRewardManager"


def test_a_batch_that_does_not_divide_over_the_gpus_is_refused_by_verl() -> None:
    from verl.utils.config import validate_config

    cfg = compose_argv(argv("grpo", _params(extra=("data.train_batch_size=3",))))
    with pytest.raises(AssertionError, match="real_train_batch_size"):
        validate_config(cfg, use_reference_policy=True, use_critic=False)


def test_sft_recipe_builds_verls_engine_dataclasses() -> None:
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_argv(argv("sft", LaunchParams(model="/m", n_gpus_per_node=4), torchrun=True))
    assert omega_conf_to_dataclass(cfg.optim).lr == 5e-5
    omega_conf_to_dataclass(cfg.checkpoint)
    assert (
        cfg.trainer.total_epochs == 3
        and cfg.data.train_batch_size == 64
        and cfg.trainer.resume_mode == "auto"
    )


def test_verl_loads_compute_score_from_the_recipe_keys() -> None:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = compose_argv(argv("grpo", _params()))
    fn = get_custom_reward_fn(cfg)
    assert fn is not None and fn.args[0] is reward_fn.compute_score  # type: ignore[attr-defined]
    assert fn.args[1] == {"reward_url": "http://reward:8300"}  # type: ignore[attr-defined]
    assert inspect.iscoroutinefunction(reward_fn.compute_score)


@pytest.fixture(scope="module")
def exported(
    verl_export: ServedExport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path]]:
    """The session's verl export and a tokenizer trained on its SFT messages."""
    root = tmp_path_factory.mktemp("verl-export-model")
    out = verl_export.out
    texts = [str(p) for p in (out / "sft").glob("*.parquet")]
    import pyarrow.parquet as pq

    corpus = [m["content"] for t in texts for r in pq.read_table(t).to_pylist() for m in r["messages"]]
    yield out, tiny_qwen3(root / "model", corpus, with_model=False)


def test_verls_rl_dataset_reads_the_export(exported: tuple[Path, Path]) -> None:
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out, model = exported
    cfg = compose_argv(argv("grpo", _params(data_dir=str(out))))
    ds = RLHFDataset(cfg.data.train_files, hf_tokenizer(str(model)), cfg.data)
    assert len(ds) > 0
    row = ds[0]
    assert row["data_source"] == "proretrieval/ecommerce"
    assert row["reward_model"]["ground_truth"].startswith("P")
    assert row["extra_info"]["instance_id"] and row["raw_prompt"][0]["role"] == "system"


def test_a_prompt_pool_is_the_exports_first_rows_for_as_many_epochs_as_asked(
    exported: tuple[Path, Path],
) -> None:
    """``scripts/verl_cpu.sh``'s POOL: verl reads only the export's first rows, in order, over several epochs."""
    import pyarrow.parquet as pq
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import hf_tokenizer

    out, model = exported
    pool = ("data.train_max_samples=4", "data.shuffle=false", "trainer.total_epochs=5")
    cfg = compose_argv(argv("grpo", _params(data_dir=str(out), extra=pool)))
    assert cfg.trainer.total_epochs == 5
    # As verl's trainer builds its training set (verl.trainer.ppo.v1.trainer_base).
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, hf_tokenizer(str(model)), None, is_train=True,
                           max_samples=cfg.data.get("train_max_samples", -1))  # fmt: skip
    first = pq.read_table(cfg.data.train_files).slice(0, 4).to_pylist()
    assert len(ds) == 4
    assert [ds[i]["extra_info"]["instance_id"] for i in range(4)] == [
        r["extra_info"]["instance_id"] for r in first
    ]


def test_verls_sft_dataset_reads_the_export(exported: tuple[Path, Path]) -> None:
    from verl.trainer.sft_trainer import create_sft_dataset
    from verl.utils import hf_tokenizer

    out, model = exported
    cfg = compose_argv(argv("sft", LaunchParams(data_dir=str(out)), torchrun=True))
    ds = create_sft_dataset(cfg.data.train_files, cfg.data, hf_tokenizer(str(model)), None)
    assert len(ds) > 0
    item = ds[0]
    assert int(item["loss_mask"].sum()) > 0, "the assistant's program is trained on"
