"""verl's real trainer (``verl.trainer.main_ppo``, its default V1 trainer with TransferQueue) on CPU in local
Ray, with the project's recipe overrides and its CPU plugin (``prore train launch grpo --cpu``:
:mod:`rl.verl.cpu`), the rollouts scored by the reward service on a loopback port (real HTTP, real chDB and
Milvus Lite behind it):

- DAPO from a planner the project's local SFT trained (``prore train sft`` in ``.venv``), which learns: rewards
  differ within groups, so advantages, the policy loss and the gradient are not zero and the weights move;
  the run stops with a checkpoint, resumes from it with the next step, and ``prore train from-verl`` turns
  the checkpoint into a planner directory.

Runs in .venv-verl (``make test-verl``); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TypedDict

import pytest

from tests.rl.verl_support import require_verl

require_verl()


from rl.verl.launch import CPU_ENV, LaunchParams, argv  # noqa: E402
from tests.rl.verl_support import ServedExport, compose_argv  # noqa: E402

DOMAIN = "ecommerce"
ROOT = Path(__file__).resolve().parents[2]
MAIN_PRORE = ROOT / ".venv" / "bin" / "prore"
"""The project's CLI in the main environment, where the local trainer (TRL) lives. TRL cannot join
``.venv-verl``: verl 0.9.1 imports ``AutoModelForCausalLMWithValueHead`` from any TRL it finds, and TRL 1.16
no longer has it, so every verl worker fails at start."""
TINY = ("data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.max_prompt_length=1024", "data.max_response_length=32", "trainer.total_training_steps=2",
        "trainer.val_before_train=false", "trainer.save_freq=-1", "trainer.test_freq=-1")  # fmt: skip
"""A smoke run's sizes (4 prompts a step, 2 rollouts each, 32 response tokens, 2 steps), as the README's hand
run of `prore train launch grpo --cpu` gives them; checked against verl's validation."""


class Setup(TypedDict):
    """What :func:`setup` yields."""

    root: Path
    """The module's directory: every run's output."""
    ws: Path
    """The benchmark's workspace (the session's :func:`verl_export`), which the SFT trains on."""
    out: Path
    """The export's directory (``rl/`` and ``sft/`` parquet)."""
    url: str
    """The reward service."""


@pytest.fixture(scope="module")
def setup(verl_export: ServedExport, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """The session's benchmark, its export (short prompts) and the reward service scoring it, and a directory
    of this module's own for the SFT planner, verl's checkpoints and logs."""
    root = tmp_path_factory.mktemp("verl-cpu")
    return {"root": root, "ws": verl_export.ws.root, "out": verl_export.out, "url": verl_export.url}


def _scored(url: str) -> float:
    """Items the service has scored for the domain (its Prometheus counter)."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    found = re.search(r'^reward_programs_scored_total\{domain="' + DOMAIN + r'"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_the_cpu_overrides_pass_verls_validation() -> None:
    from verl.utils.config import validate_config

    cfg = compose_argv(
        argv("grpo", LaunchParams(model="/m", n_gpus_per_node=1, micro_batch=2, cpu=True, extra=TINY))
    )
    validate_config(cfg, use_reference_policy=True, use_critic=False)
    assert (cfg.trainer.device, cfg.actor_rollout_ref.rollout.name, cfg.ray_kwargs.ray_init.num_gpus) == (
        "cpu",
        "hf",
        1,
    )
    # FSDP computes in float32, as the transformers rollout does (verl's default casts to bf16 and autocasts)
    import torch
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.torch_dtypes import PrecisionType

    for role in (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref):
        engine = omega_conf_to_dataclass(role.fsdp_config)
        assert {PrecisionType.to_dtype(d) for d in engine.mixed_precision.values()} == {torch.float32}


def test_verl_loads_the_plugin_from_its_external_module_hook() -> None:
    """A fresh interpreter: ``import verl`` with ``VERL_USE_EXTERNAL_MODULES`` leaves verl on the CPU
    platform with FSDP2 engines for ``cpu``, the ``hf`` rollout in both of its registries, and the replay
    buffer polling every 0.1 s (:mod:`rl.verl.cpu.patches`)."""
    probe = (
        "import verl\n"
        "from verl.utils.device import get_device_name, get_nccl_backend, get_device_id\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "from verl.workers.rollout.replica import get_rollout_replica_class\n"
        "from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer\n"
        "print(get_device_name(), get_nccl_backend(), get_device_id(),\n"
        "      EngineRegistry.get_engine_cls('language_model', 'fsdp2').__name__,\n"
        "      get_rollout_class('hf', 'async').__name__, get_rollout_replica_class('hf').__name__,\n"
        "      ReplayBuffer.__init__.__kwdefaults__['poll_interval'])\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": CPU_ENV.split("=", 1)[1]}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [
        "cpu",
        "gloo",
        "cpu",
        "FSDPEngineWithLMHead",
        "HFServerAdapter",
        "HFReplica",
        "0.1",
    ]


LEARN = ("data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.optim.lr=1e-4", "data.max_prompt_length=1024", "data.max_response_length=96",
         "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=2",
         "trainer.logger=[console,file]",
         "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]")  # fmt: skip
"""4 prompts a step, G = 4, 96 response tokens, a checkpoint (with the Hugging Face model) every 2 steps."""


@pytest.fixture(scope="module")
def sft_planner(setup: Setup) -> Path:
    """A small planner trained by the project's local SFT on the benchmark the reward service scores, with
    the export's prompt profile: the model a cluster's RL starts from. In float32 on every CPU: ``auto``
    precision trains in bf16 where the CPU has bf16 units (AVX512-BF16, AMX), a different model, which on
    such a CPU solved every rollout of the first step, so that the step had nothing to learn from."""
    if not MAIN_PRORE.is_file():
        pytest.skip("the local SFT runs in .venv (`make setup`), beside .venv-verl")
    out = setup["root"] / "sft"
    cmd = [str(MAIN_PRORE), "--workspace", str(setup["ws"]), "train", "sft", "--domain", DOMAIN,
           "--size", "xs", "--profile", "short", "--lr", "5e-3", "--max-steps", "150", "--eval-steps", "150",
           "--precision", "fp32", "--out", str(out)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    run = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, env={**env, "PRORE_TRAIN_THREADS": "2"}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out / "final"


def _dapo(setup: Setup, model: Path, steps: int, log: Path) -> subprocess.CompletedProcess[str]:
    p = LaunchParams(model=str(model), data_dir=str(setup["out"]), n_gpus_per_node=1, micro_batch=4,
                     checkpoint_dir=str(setup["root"] / "dapo-ckpt"), experiment="dapo", reward_url=setup["url"],
                     python=sys.executable, extra=(*LEARN, f"trainer.total_training_steps={steps}"), cpu=True)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    run = subprocess.run(argv("dapo", p), capture_output=True, text=True, timeout=1200, cwd=setup["root"],
                         env={**env, "VERL_FILE_LOGGER_PATH": str(log)})  # fmt: skip
    (log.with_suffix(".log")).write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    assert run.returncode == 0, run.stdout[-3000:] + "\n--- stderr ---\n" + run.stderr[-5000:]
    return run


def _steps(log: Path) -> dict[int, dict[str, float]]:
    """verl's file-logger records: step to metrics."""
    return {r["step"]: r["data"] for r in map(json.loads, log.read_text().splitlines())}


@pytest.mark.timeout(2400)  # its subprocesses' own limits: SFT 900 s, each verl run 1,200 s
def test_dapo_from_an_sft_planner_learns_checkpoints_and_resumes(setup: Setup, sft_planner: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from rl.verl.checkpoint import checkpoint_steps, import_planner
    from serving.prompt import read_card

    root: Path = setup["root"]
    before_scored = _scored(setup["url"])
    run = _dapo(setup, sft_planner, 2, root / "dapo-1-2.jsonl")
    # 2 steps x 4 prompts x 4 rollouts reached the service and were scored there
    assert _scored(setup["url"]) - before_scored >= 2 * 4 * 4
    # the hf rollout took the actor's weights before each step's generation (verl's naive sync)
    assert len(re.findall(r"hf rollout 0: loaded \d+ tensors from the actor \(sync (\d+)", run.stdout)) >= 2
    logged = _steps(root / "dapo-1-2.jsonl")
    assert sorted(logged) == [1, 2]
    # GRPO learns from the steps whose rollouts score differently: there, advantages of both signs, a policy
    # loss and a gradient; a step whose every rollout scores alike has none of them (nothing to learn)
    mixed = [step for step, m in logged.items() if m["critic/score/max"] > m["critic/score/min"]]
    assert mixed, {step: (m["critic/score/min"], m["critic/score/max"]) for step, m in logged.items()}
    for step, m in logged.items():
        assert "critic/score/mean" in m  # the reward's mean over the step's groups
        if step in mixed:
            assert m["critic/advantages/max"] > 0 > m["critic/advantages/min"], step
            assert m["actor/pg_loss"] != 0 and m["actor/grad_norm"] > 0, (
                step,
                m["actor/pg_loss"],
                m["actor/grad_norm"],
            )
        else:
            assert m["critic/advantages/max"] == m["critic/advantages/min"] == 0, step
    ckpt = root / "dapo-ckpt" / "dapo"
    assert checkpoint_steps(ckpt) == [2]

    # launched again with one more step, verl resumes from step 2's checkpoint and logs only step 3
    _dapo(setup, sft_planner, 3, root / "dapo-3.jsonl")
    assert sorted(_steps(root / "dapo-3.jsonl")) == [3]
    assert checkpoint_steps(ckpt) == [2, 3]

    planner = import_planner(ckpt, sft_planner, root / "dapo-planner", algorithm="dapo")
    card = read_card(planner)
    assert (card["profile"], card["algorithm"], card["verl_step"]) == ("short", "dapo", 3)
    before, after = load_file(sft_planner / "model.safetensors"), load_file(planner / "model.safetensors")
    moved = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert moved and set(before) <= set(after) | {"lm_head.weight"}, (
        len(moved),
        sorted(set(before) - set(after))[:3],
    )
    model = AutoModelForCausalLM.from_pretrained(planner)  # loads as the planner path loads it
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(sft_planner).config.vocab_size
