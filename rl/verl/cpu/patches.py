"""The one place the CPU plugin changes verl's code instead of registering into it; each patch names the
verl 0.9.1 line it works around.

1. verl/utils/distributed.py:89 (``initialize_global_process_group_ray``) builds the process group's
   backend as ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"``; with the device ``cpu`` that is
   ``"cpu:gloo,cpu:gloo"``, which torch refuses (``ValueError: Duplicate device type cpu in backend
   string: gloo``, torch/distributed/distributed_c10d.py ``BackendConfig``). The trainer's workers call it
   without a backend (verl/workers/engine_workers.py:89, which imported the name at line 38), so the
   patch replaces that module's name with one that passes ``backend="cpu:gloo"`` when none is given.
2. verl/workers/engine/fsdp/transformer_impl.py:462 gives every forward-only FSDP2 model (the reference
   policy) ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator (``RuntimeError: Cannot
   access accelerator device when none is available.``, torch/distributed/fsdp/_fully_shard/
   _fsdp_param.py:315). The patch gives that module a ``CPUOffloadPolicy`` that never pins.
3. verl/trainer/ppo/v1/replay_buffer.py:144 gives the V1 trainer's ``ReplayBuffer`` a ``poll_interval`` of
   2 s, and verl/trainer/ppo/v1/trainer_base.py:155 builds it without one (no config key reaches it), so
   every step waits for its rollouts in 2 s sleeps (:409): each CPU step's ``timing_s/gen`` was 2.01 or
   4.02 s for rollouts that took well under one. The patch makes the default :data:`POLL_INTERVAL_S`.
"""

from __future__ import annotations

import functools
from typing import Any

from torch.distributed.fsdp import CPUOffloadPolicy
from verl.trainer.ppo.v1 import replay_buffer as _replay_buffer
from verl.utils import distributed as _distributed
from verl.workers import engine_workers as _engine_workers
from verl.workers.engine.fsdp import transformer_impl as _fsdp_impl

_original = _distributed.initialize_global_process_group_ray
_replay_init = _replay_buffer.ReplayBuffer.__init__
POLL_INTERVAL_S = 0.1
"""How often the CPU trainer checks whether a step's rollouts are in (verl's default: 2 s)."""


@functools.wraps(_original)
def _initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
    return _original(timeout_second=timeout_second, backend=backend or "cpu:gloo")


@functools.wraps(_replay_init)
def _replay_buffer_init(self: Any, *args: Any, poll_interval: float = POLL_INTERVAL_S, **kwargs: Any) -> None:
    _replay_init(self, *args, poll_interval=poll_interval, **kwargs)


class _UnpinnedCPUOffloadPolicy(CPUOffloadPolicy):  # type: ignore[misc]
    """FSDP2's CPU offload without pinned memory (there is no accelerator to pin for)."""

    def __init__(self, pin_memory: bool = False) -> None:
        super().__init__(pin_memory=False)


def apply() -> None:
    """Install the patches (idempotent)."""
    _engine_workers.initialize_global_process_group_ray = _initialize_global_process_group_ray
    _distributed.initialize_global_process_group_ray = _initialize_global_process_group_ray
    _fsdp_impl.CPUOffloadPolicy = _UnpinnedCPUOffloadPolicy
    _replay_buffer.ReplayBuffer.__init__ = _replay_buffer_init  # type: ignore[method-assign]
