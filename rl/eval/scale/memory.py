"""Peak resident memory of a scaling run and of its Milvus server, per phase of the run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class MemorySampler:
    """Peak resident memory (MB) of this process and of the Milvus server, per named phase.

    A thread samples both every ``interval_s`` with psutil (the server with its child processes).
    """

    def __init__(self, server_pid: int | None, interval_s: float = 0.25) -> None:
        import psutil  # type: ignore[import-untyped]

        self._psutil = psutil
        self._me = psutil.Process()
        self._server = psutil.Process(server_pid) if server_pid else None
        self._phase = "setup"
        self.peaks: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._interval = interval_s
        self._thread.start()

    def _rss(self, proc: Any, *, children: bool) -> float:
        total = 0
        with contextlib.suppress(self._psutil.Error):
            total += proc.memory_info().rss
            for child in proc.children(recursive=True) if children else ():
                with contextlib.suppress(self._psutil.Error):
                    total += child.memory_info().rss
        return total / 2**20

    def sample(self) -> None:
        peak = self.peaks.setdefault(self._phase, {"bench_mb": 0.0, "milvus_mb": 0.0})
        # This process alone: the server it started is one of its children, counted apart.
        peak["bench_mb"] = max(peak["bench_mb"], round(self._rss(self._me, children=False), 1))
        if self._server is not None:
            peak["milvus_mb"] = max(peak["milvus_mb"], round(self._rss(self._server, children=True), 1))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.sample()
        before, self._phase = self._phase, name
        try:
            yield
        finally:
            self.sample()
            self._phase = before

    def set_server(self, pid: int | None) -> None:
        """Sample the server process ``pid`` from now on (after a restart)."""
        self._server = self._psutil.Process(pid) if pid else None

    def set_phase(self, name: str) -> None:
        self.sample()
        self._phase = name

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
