"""What the benchmarks under ``bench/`` share: their setup, where their numbers come from and where they go.

Importing this module sets a benchmark's process up, before the project's packages are imported: models
load from the local cache only (``HF_HUB_OFFLINE=1``), tokenizers do not start threads of their own
(``TOKENIZERS_PARALLELISM=false``; both unless already set), the repository root comes first on
``sys.path``, so ``python bench/x.py`` runs this checkout's packages, and SIGTERM (a ``timeout``, a job
runner's stop) exits as ``SystemExit(143)``, so every ``finally`` and ``with`` block runs and the Milvus
servers, model servers and APIs a benchmark started are stopped (before, a bench stopped by ``timeout`` left its
servers holding the workspace's chDB). Then:

- :func:`machine`: the cores, CPU model, Python, torch threads and load at start, recorded in every JSON;
- :func:`percentile`: a percentile of latencies (numpy's, by the rank rule a benchmark reports);
- :func:`write_results`: the results JSON (each script's default path is under :data:`RESULTS`);
- :func:`ensure_corpus`: the seeded ``ecommerce`` corpus of a size, generated once per workspace;
- :func:`run_prore`: one ``prore`` command in a fresh process, to its end: its wall and CPU seconds (the
  process and all it waited for), minor page faults and peak resident memory;
- :func:`two_candidates`: the medians of such runs for two candidates, per workload and metric, with their
  ratio, printed as a table;
- :func:`start_milvus` / :func:`stop_milvus`: the local Milvus standalone server (``prore stores up``) of
  a benchmark's directory;
- :func:`run_main`: a script's (and its child processes') entry point, which ends the process with the status
  ``main`` returns, past chDB's shutdown.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
"""The repository."""
RESULTS = ROOT / "bench" / "results"
"""Where the benchmarks write their results (JSON, plots) and keep their workspaces by default."""

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(ROOT))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _exit_on_sigterm)

Rank = Literal["inverted_cdf", "nearest", "linear"]
"""How :func:`percentile` picks a value (numpy's ``method``): ``inverted_cdf`` the nearest rank (the smallest
value with at least ``q`` percent of the values at or below it), ``nearest`` the value at the position
``q / 100 * (n - 1)`` rounded, ``linear`` between the two values around that position."""


VECTOR_UNITS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
"""The CPU flags that decide how fast PyTorch's and ONNX Runtime's kernels run here: the same command took 0.18 s
a training step on a CPU with bf16 units and 3.6 s on an AVX2 one (README, "Precision")."""


def machine() -> dict[str, Any]:
    """A description of this machine, recorded in every benchmark's JSON: cores, the CPU's model and which of
    :data:`VECTOR_UNITS` it has, Python, the platform, the load and torch's threads."""
    cpu, flags = platform.processor() or "unknown", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "vector_units": [unit for unit in VECTOR_UNITS if unit in flags],
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


def percentile(values: Sequence[float], q: float, method: Rank = "inverted_cdf") -> float:
    """The ``q`` percentile (0 to 100) of ``values`` by ``method``; NaN for no values.

    >>> percentile([4.0, 1.0, 3.0, 2.0], 50), percentile([4.0, 1.0, 3.0, 2.0], 95)
    (2.0, 4.0)
    >>> percentile([4.0, 1.0, 3.0, 2.0], 50, "nearest"), percentile([], 95)
    (3.0, nan)
    """
    if not len(values):
        return math.nan
    return float(np.percentile(values, q, method=method))


def write_results(path: Path | str, results: Any) -> Path:
    """Write ``results`` to ``path`` as indented JSON (a value JSON has no form for as its ``str``), creating
    the folder; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return out


def ensure_corpus(workspace: Path, size: int) -> None:
    """Generate the ``ecommerce`` corpus of ``size`` products (seed 0) in ``workspace``, unless its manifest
    already counts ``size`` rows."""
    from indexing.corpora import generate, generator_version
    from indexing.corpora.files import write_corpus
    from indexing.schema import PRODUCTS
    from indexing.workspace import Workspace

    ws = Workspace(workspace)
    manifest = ws.corpus_dir("ecommerce") / "manifest.json"
    if not manifest.is_file() or json.loads(manifest.read_text()).get("rows") != size:
        meta = {
            "generator": "ecommerce",
            "generator_version": generator_version("ecommerce"),
            "size": size,
            "seed": 0,
        }
        write_corpus(ws, PRODUCTS, generate("ecommerce", size, seed=0), meta)


PRORE = str(ROOT / ".venv" / "bin" / "prore")
"""The project's command line in this checkout's environment."""


def run_prore(workspace: Path, *args: str, env: Mapping[str, str] | None = None) -> dict[str, float]:
    """Run ``prore --workspace WORKSPACE ARGS`` to its end (``SystemExit`` with its output if it fails);
    its ``wall_s``, ``cpu_s`` (user + system, from ``wait4``), ``system_s``, ``minor_faults`` and
    ``peak_rss_mb``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PRORE, "--workspace", str(workspace), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )  # fmt: skip
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"prore {' '.join(args)} exited {proc.returncode}:\n{out.decode()[-3000:]}")
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "system_s": usage.ru_stime,
        "minor_faults": float(usage.ru_minflt),
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def two_candidates(
    runs: Mapping[str, Mapping[str, Sequence[Mapping[str, float]]]],
    names: tuple[str, str],
    metrics: Sequence[str],
) -> dict[str, dict[str, dict[str, float]]]:
    """``runs[workload][candidate]`` (each a list of :func:`run_prore` results) as medians per workload and
    metric for the two ``names``, with the second's ratio to the first; prints them as a table."""
    a_name, b_name = names
    ratio_name = f"{b_name}/{a_name}"
    print(f"{'workload':9} {'metric':13} {a_name:>10} {b_name:>10} {ratio_name:>{max(12, len(ratio_name))}}")
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for workload, by_name in runs.items():
        summary[workload] = {}
        for metric in metrics:
            a, b = (float(np.median([r[metric] for r in by_name[n]])) for n in names)
            ratio = b / a if a else float("nan")
            summary[workload][metric] = {a_name: a, b_name: b, "ratio": ratio}
            print(f"{workload:9} {metric:13} {a:10.1f} {b:10.1f} {ratio:{max(12, len(ratio_name)) - 1}.2f}x")
    return summary


def start_milvus(root: Path, *, settings: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
    """The URI of a local Milvus server (``prore stores up``) started in ``root / "milvus-server"`` on a free
    port (``settings``: keys of its ``milvus.yaml``), or None and why not."""
    try:
        from core.errors import ProReError
        from indexing.stores import server
    except ImportError as exc:
        return None, f"no Milvus server: {exc}"
    failure = ""
    for _ in range(2):  # its internal ports are picked before it binds them: another server may win one
        try:
            info = server.start(server.server_dir(root), port=server.free_port(), settings=settings)
        except ProReError as exc:
            failure = exc.one_line()
            continue
        return info.uri, "started"
    return None, f"the Milvus server did not start: {failure}"


def stop_milvus(root: Path, *, timeout_s: float = 15.0) -> None:
    """Stop the server :func:`start_milvus` started in ``root``."""
    from indexing.stores import server

    server.stop(server.server_dir(root), timeout_s=timeout_s)


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory in MB so far (``VmHWM`` of ``/proc/PID/status``)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Run a benchmark's ``main`` and end the process with its status (``None``: 0) through
    :func:`indexing.index.exit_process`. A process that opened chDB can hang or abort at interpreter exit, in
    chDB's and Arrow's static destructors, after its work is done: ``bench/reward.py``'s stage-budget child
    printed its JSON and then waited forever in Arrow's thread-pool shutdown, and its parent with it."""
    from indexing.index import exit_process

    exit_process(main() or 0)
