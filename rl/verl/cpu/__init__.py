"""verl 0.9.1 on CPU: the project's platform plugin, loaded by verl's external-module hook.

``VERL_USE_EXTERNAL_MODULES=rl.verl.cpu`` makes every process that imports verl (the driver, the Ray
task runner and workers) import this package right after verl's own ``__init__``
(verl/__init__.py:49-52). Importing it registers, through verl's registries only:

- the ``cpu`` platform (:mod:`rl.verl.cpu.platform`) and makes it current: device ``cpu``, collectives on
  gloo, Ray's ``GPU`` resource as a logical slot per trainer process;
- verl's own FSDP/FSDP2 engines for device ``cpu`` (``EngineRegistry``; verl registers them for ``cuda``
  and ``npu`` only, verl/workers/engine/fsdp/transformer_impl.py:1143 and :1594);
- the ``hf`` rollout (:mod:`rl.verl.cpu.rollout`): a transformers server per replica
  (``RolloutReplicaRegistry``) and its weight-sync adapter (``_ROLLOUT_REGISTRY``).

Each of those processes also keeps its freed buffers for the next step (:mod:`core.memory`).

What verl offers no extension point for is patched in one place, :mod:`rl.verl.cpu.patches` (the
process group's backend string, the reference policy's pinned offload, the replay buffer's 2 s poll).

It imports verl, so it lives only in ``.venv-verl``; nothing in the main package imports it.
``prore train launch grpo --cpu`` adds the environment variable and the overrides
(:func:`rl.verl.launch.cpu_overrides`).
"""

from __future__ import annotations

from verl.plugin.platform import set_platform

from core.memory import keep_freed_memory
from rl.verl.cpu.platform import PlatformCPU

# First, before the imports below ask verl's modules for the device.
set_platform(PlatformCPU())
# Every verl process on CPU (trainer, actor, reference, rollout) keeps its freed buffers for the next step.
keep_freed_memory()

from verl.workers.engine.base import EngineRegistry  # noqa: E402
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead  # noqa: E402
from verl.workers.rollout import base as _rollout_base  # noqa: E402
from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: E402

from rl.verl.cpu import patches  # noqa: E402
from rl.verl.cpu.rollout import NAME  # noqa: E402


def _register() -> None:
    for model_type, engine in (
        ("language_model", FSDPEngineWithLMHead),
        ("value_model", FSDPEngineWithValueHead),
    ):
        if "cpu" not in EngineRegistry._engines.get(model_type, {}).get("fsdp2", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(engine)
    _rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = "rl.verl.cpu.rollout.HFServerAdapter"

    def _load_replica() -> type:
        from rl.verl.cpu.rollout import HFReplica

        return HFReplica

    RolloutReplicaRegistry.register(NAME, _load_replica)
    patches.apply()


_register()
