"""verl's platform for CPU: torch's CPU device, gloo for collectives, and Ray's ``GPU`` resource read as a
logical slot (one per trainer process).

verl 0.9.1 resolves every device question through :func:`verl.plugin.platform.get_platform` (device name,
torch device module, collective backend, Ray resource). This platform answers them for CPU. Ray's ``GPU``
resource is kept as the slot name because ``ResourcePoolManager._check_resource_available``
(verl/single_controller/ray/base.py:226-242) counts only ``GPU`` or ``NPU``; the launch declares as many
logical GPUs as trainer processes (``ray_kwargs.ray_init.num_gpus``), and nothing touches a CUDA device.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry


class _CPUDevice(ModuleType):
    """``torch.cpu`` plus the calls verl makes on an accelerator module (caches, memory, RNG), which on
    CPU are no-ops or the CPU generator's."""

    def __init__(self) -> None:
        super().__init__("rl.verl.cpu.device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
        free = os.sysconf("SC_AVPHYS_PAGES")
        return free * page, pages * page

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


CPU_DEVICE = _CPUDevice()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):  # type: ignore[misc]
    """The CPU as verl's accelerator."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> str:  # type: ignore[override]
        """``"cpu"``, not an index: verl uses ``get_device_id()`` as the device of ``.to()``,
        ``torch.device()`` and ``device=`` (verl/utils/fsdp_utils.py:507 and others), where an int means
        an accelerator."""
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
