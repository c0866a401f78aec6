"""Where benchmark numbers come from: cores, CPU model, Python, torch threads and load at start; the
one name of a benchmark configuration (an embedder at a corpus size) that the benches share; and the
local Milvus server a bench compares against Milvus Lite."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def size_label(n: int) -> str:
    """``5000`` -> ``5k``, ``1000000`` -> ``1M``, ``2500`` -> ``2500``."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


@dataclass(frozen=True)
class Run:
    """One configuration: an embedder at a corpus size."""

    embedder: str
    docs: int

    @property
    def label(self) -> str:
        return f"{self.embedder} {size_label(self.docs)}"

    def workspace(self, root: Path) -> Path:
        """This run's own workspace below ``root``."""
        return root / f"{self.embedder}-{size_label(self.docs)}"


def machine() -> dict[str, Any]:
    """A description of this machine, recorded in every benchmark's JSON."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def start_milvus(root: Path) -> tuple[str | None, str]:
    """The URI of a local Milvus server (``prore stores up``) started in ``root / "milvus-server"``, or None
    and why not."""
    try:
        from indexing.errors import ProReError
        from indexing.stores import server
    except ImportError as exc:
        return None, f"no Milvus server: {exc}"
    failure = ""
    for _ in range(2):  # its internal ports are picked before it binds them: another server may win one
        try:
            info = server.start(root / "milvus-server", port=server.free_port())
        except ProReError as exc:
            failure = exc.one_line()
            continue
        return info.uri, "started"
    return None, f"the Milvus server did not start: {failure}"


def stop_milvus(root: Path) -> None:
    """Stop the server :func:`start_milvus` started in ``root``."""
    from indexing.stores import server

    server.stop(root / "milvus-server", timeout_s=15)
