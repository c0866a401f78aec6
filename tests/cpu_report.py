"""A pytest plugin that says where the suite's CPU goes: ``.venv/bin/python -m pytest -n 0 -p tests.cpu_report``.

Around each test (setup, call and teardown) it reads the machine's busy CPU time from ``/proc/stat``, so a test's
figure includes the servers, subprocesses and engine processes it starts, which a per-process clock misses. At
the end it prints the files that used the most core-seconds, with their wall time and the cores they kept busy,
and writes every test's ``[wall_s, cpu_s]`` as JSON to ``--cpu-report-json`` (default
``.ci/logs/cpu-report.json``). Run the suite alone on the machine: another job's CPU counts towards whichever test
is running. With pytest-xdist each worker measures the whole machine, so run it in one process (``-n 0``).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

_ROWS: dict[str, tuple[float, float]] = {}


def busy_seconds() -> float:
    """Core-seconds the machine has spent busy (user, nice, system, irq, softirq) since boot."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report-json", default=".ci/logs/cpu-report.json",
                     help="where tests.cpu_report writes each test's [wall_s, cpu_s]")  # fmt: skip
    parser.addoption("--cpu-report-files", type=int, default=25, help="files tests.cpu_report lists")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    cpu0, wall0 = busy_seconds(), time.monotonic()
    yield
    _ROWS[item.nodeid] = (time.monotonic() - wall0, busy_seconds() - cpu0)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _ROWS:
        return
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for nodeid, (wall, cpu) in _ROWS.items():
        totals = files[nodeid.split("::", 1)[0]]
        totals[0] += wall
        totals[1] += cpu
    wall_all = sum(w for w, _ in _ROWS.values())
    cpu_all = sum(c for _, c in _ROWS.values())
    write = terminalreporter.write_line
    terminalreporter.section("CPU by file (core-seconds from /proc/stat)")
    write(
        f"{len(_ROWS)} tests: {wall_all:.0f} s wall, {cpu_all:.0f} core-s, {cpu_all / max(wall_all, 1e-9):.2f} cores busy"
    )
    write(f"{'core-s':>8} {'wall s':>8} {'cores':>6}  file")
    ranked = sorted(files.items(), key=lambda kv: -kv[1][1])
    for name, (wall, cpu) in ranked[: config.getoption("--cpu-report-files")]:
        write(f"{cpu:8.0f} {wall:8.0f} {cpu / max(wall, 1e-9):6.2f}  {name}")
    out = Path(config.getoption("--cpu-report-json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({k: [round(w, 3), round(c, 3)] for k, (w, c) in _ROWS.items()}, indent=0))
    write(f"each test's [wall_s, cpu_s]: {out}")
