"""The command a Ray job runs to train with verl: entrypoint plus recipe overrides, as an argv list.

:func:`argv` is a pure function of the recipe and the launch parameters, so the CLI
(``prore train launch ... --print``) and a Kubernetes operator building a RayJob's ``entrypoint`` share it.

- GRPO and DAPO: ``python3 -m verl.trainer.main_ppo`` (Hydra config ``ppo_trainer``).
- SFT: ``python3 -m verl.trainer.sft_trainer_ray`` on a Ray cluster, whose head needs no GPU; with
  ``torchrun=True``, ``torchrun --standalone --nnodes=1 --nproc_per_node=G -m verl.trainer.sft_trainer`` on
  one machine. Both read Hydra config ``sft_trainer_engine`` and take the same overrides.

>>> cmd = argv("grpo", LaunchParams(model="/models/qwen3-4b", nnodes=2))
>>> cmd[:3], "trainer.nnodes=2" in cmd
(['python3', '-m', 'verl.trainer.main_ppo'], True)
>>> argv("sft", LaunchParams(n_gpus_per_node=4), torchrun=True)[:5]
['torchrun', '--standalone', '--nnodes=1', '--nproc_per_node=4', '-m']

With ``cpu=True`` (``prore train launch grpo --cpu``) the same recipe runs on CPU in ``.venv-verl`` with the
project's verl plugin :mod:`rl.verl.cpu`:

>>> cmd = argv("grpo", LaunchParams(n_gpus_per_node=1, cpu=True))
>>> cmd[:3], "actor_rollout_ref.rollout.name=hf" in cmd
(['env', 'VERL_USE_EXTERNAL_MODULES=rl.verl.cpu', 'python3'], True)
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from rl.errors import TrainError
from rl.verl.recipes import ALGORITHMS, overrides, params

PPO_MODULE = "verl.trainer.main_ppo"
SFT_MODULE = "verl.trainer.sft_trainer"
SFT_RAY_MODULE = "verl.trainer.sft_trainer_ray"

_DEFAULTS = params()


@dataclass(frozen=True)
class LaunchParams:
    """The parameters of a launch; each default comes from the ``params`` section of the defaults file."""

    model: str = _DEFAULTS["model"]
    """Hugging Face id or local directory of the policy (the paper's Qwen3-4B by default)."""
    n_gpus_per_node: int = _DEFAULTS["n_gpus_per_node"]
    """GPUs on each node."""
    nnodes: int = _DEFAULTS["nnodes"]
    """Nodes of the Ray cluster."""
    data_dir: str = _DEFAULTS["data_dir"]
    """Directory written by ``prore train export`` (with ``rl/`` and ``sft/``), as the workers see it."""
    checkpoint_dir: str = _DEFAULTS["checkpoint_dir"]
    """Checkpoint root; a restarted job resumes from the newest checkpoint under it."""
    experiment: str = _DEFAULTS["experiment"]
    """Run name (trackers, checkpoint subdirectory)."""
    rollout_tp: int = _DEFAULTS["rollout_tp"]
    """Tensor-parallel size of each rollout engine."""
    rollout_engine: str = _DEFAULTS["rollout_engine"]
    """verl rollout engine name (``vllm`` on GPUs)."""
    micro_batch: int = _DEFAULTS["micro_batch"]
    """Per-GPU micro-batch of the training and log-prob passes."""
    reward_url: str | None = None
    """Base URL of the reward service, passed to the reward function; None: the workers' ``PRORE_REWARD_URL``."""
    dynamic_sampling: bool = False
    """DAPO only: verl's dynamic sampling (``algorithm.filter_groups``)."""
    python: str = "python3"
    """Interpreter of the entrypoint."""
    extra: tuple[str, ...] = field(default_factory=tuple)
    """Further Hydra overrides, appended as given (they win)."""
    cpu: bool = False
    """GRPO and DAPO only: run on CPU in local Ray with the project's verl plugin (:mod:`rl.verl.cpu`, in
    ``.venv-verl``): a transformers rollout, FSDP2 on gloo, for small models and smoke runs. :data:`CPU_ENV`
    goes before the interpreter, :func:`cpu_overrides` after the recipe's, ``extra`` last."""

    def __post_init__(self) -> None:
        for name in ("n_gpus_per_node", "nnodes", "rollout_tp", "micro_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainError(f"{name} must be a positive integer, got {value!r}", code="train_param")

    def recipe_params(self) -> dict[str, object]:
        """The values the recipes' ``{placeholders}`` take."""
        names = set(_DEFAULTS)
        return {k: v for k, v in asdict(self).items() if k in names}


CPU_PLUGIN = "rl.verl.cpu"
"""The project's verl plugin for CPU, which verl imports in every process from ``VERL_USE_EXTERNAL_MODULES``."""
CPU_ENV = f"VERL_USE_EXTERNAL_MODULES={CPU_PLUGIN}"


FP32_COMPUTE = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
"""FSDP's mixed precision on CPU: compute in float32. Without it verl's FSDP engine casts the parameters to bf16
and autocasts the forward to bf16, which a CPU without bf16 units (AVX2) emulates many times slower than fp32
(``rl.train.run.uses_bf16``), and which the float32 transformers rollout would not match."""


def cpu_overrides(p: LaunchParams) -> tuple[str, ...]:
    """The verl overrides of a CPU run (after the recipe's): the ``hf`` rollout of :mod:`rl.verl.cpu`,
    FSDP2 in float32 on gloo (weights and compute, :data:`FP32_COMPUTE`), no fused or compiled kernels, and
    Ray's resources as logical slots.

    Ray's ``GPU`` count is one slot per trainer process (verl's resource check counts only GPUs); its
    CPU count is logical too: verl's task runner, TransferQueue's controller and storage units, the
    agent-loop and reward workers each reserve one, and with Ray's count at the real 2 cores the trainer's
    placement group waits forever (TransferQueue alone asks for 9 by default; one storage unit here, and
    one agent-loop and one reward worker). Ray starts without its dashboard and without the idle workers it
    prestarts for a first driver, which verl's workers never take (they ask for the job's runtime environment):
    both are imports that a 2-core run pays for and nothing uses.
    """
    slots = p.n_gpus_per_node * p.nnodes
    return (
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.dtype=float32",
        "actor_rollout_ref.ref.fsdp_config.dtype=float32",
        f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={FP32_COMPUTE}",
        f"+actor_rollout_ref.ref.fsdp_config.mixed_precision={FP32_COMPUTE}",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.ref.use_torch_compile=false",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"+ray_kwargs.ray_init.num_gpus={slots}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "data.dataloader_num_workers=0",
        f"ray_kwargs.ray_init.num_cpus={16 + 2 * slots}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={CPU_PLUGIN}",
        "+ray_kwargs.ray_init.include_dashboard=false",
        "+ray_kwargs.ray_init._system_config.prestart_worker_first_driver=false",
    )


def argv(algorithm: str, p: LaunchParams | None = None, *, torchrun: bool = False) -> list[str]:
    """The entrypoint and overrides of recipe ``algorithm`` (``sft``, ``grpo`` or ``dapo``)."""
    p = p or LaunchParams()
    if algorithm not in ALGORITHMS:
        raise TrainError(
            f"unknown recipe {algorithm!r}; choose one of {', '.join(ALGORITHMS)}", code="train_recipe"
        )
    extra = (*cpu_overrides(p), *p.extra) if p.cpu else p.extra
    ov = overrides(algorithm, p.recipe_params(), dynamic_sampling=p.dynamic_sampling,
                   reward_url=p.reward_url, extra=extra)  # fmt: skip
    if algorithm != "sft":
        if torchrun:
            raise TrainError("torchrun launches SFT only; GRPO and DAPO run under Ray", code="train_param")
        return [*(("env", CPU_ENV) if p.cpu else ()), p.python, "-m", PPO_MODULE, *ov]
    if p.cpu:
        raise TrainError(
            "--cpu runs GRPO and DAPO (verl's main_ppo); SFT on CPU is not wired", code="train_param"
        )
    if not torchrun:
        return [p.python, "-m", SFT_RAY_MODULE, *ov]
    if p.nnodes != 1:
        raise TrainError("torchrun here runs on one machine; use the Ray entrypoint for several nodes",
                         code="train_param")  # fmt: skip
    return [
        "torchrun",
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={p.n_gpus_per_node}",
        "-m",
        SFT_MODULE,
        *ov,
    ]


def command_line(cmd: Sequence[str]) -> str:
    """One shell line for ``cmd``, each word quoted as a POSIX shell needs."""
    return shlex.join(cmd)
