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
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from rl.verl.errors import TrainError
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
    """Directory written by ``prore train export`` (with ``rl/`` and ``sft/``)."""
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

    def __post_init__(self) -> None:
        for name in ("n_gpus_per_node", "nnodes", "rollout_tp", "micro_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainError(f"{name} must be a positive integer, got {value!r}", code="train_param")

    def recipe_params(self) -> dict[str, object]:
        """The values the recipes' ``{placeholders}`` take."""
        names = set(_DEFAULTS)
        return {k: v for k, v in asdict(self).items() if k in names}


def argv(algorithm: str, p: LaunchParams | None = None, *, torchrun: bool = False) -> list[str]:
    """The entrypoint and overrides of recipe ``algorithm`` (``sft``, ``grpo`` or ``dapo``)."""
    p = p or LaunchParams()
    if algorithm not in ALGORITHMS:
        raise TrainError(f"unknown recipe {algorithm!r}; choose one of {', '.join(ALGORITHMS)}", code="train_recipe")
    ov = overrides(algorithm, p.recipe_params(), dynamic_sampling=p.dynamic_sampling,
                   reward_url=p.reward_url, extra=p.extra)  # fmt: skip
    if algorithm != "sft":
        if torchrun:
            raise TrainError("torchrun launches SFT only; GRPO and DAPO run under Ray", code="train_param")
        return [p.python, "-m", PPO_MODULE, *ov]
    if not torchrun:
        return [p.python, "-m", SFT_RAY_MODULE, *ov]
    if p.nnodes != 1:
        raise TrainError("torchrun here runs on one machine; use the Ray entrypoint for several nodes",
                         code="train_param")  # fmt: skip
    return ["torchrun", "--standalone", "--nnodes=1", f"--nproc_per_node={p.n_gpus_per_node}", "-m", SFT_MODULE, *ov]


def command_line(cmd: Sequence[str]) -> str:
    """One shell line for ``cmd``, each word quoted as a POSIX shell needs."""
    return shlex.join(cmd)
