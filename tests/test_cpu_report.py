"""``python -m pytest -p tests.cpu_report`` (the README's Development section): the table and the JSON it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUSY = """
def test_busy():
    total = 0
    for i in range(3_000_000):
        total += i
    assert total > 0


def test_idle():
    assert True
"""


def test_the_report_lists_each_tests_wall_and_cpu_seconds(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(BUSY)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.cpu_report", "-p", "no:cacheprovider", "-n", "0",
         "--rootdir", str(tmp_path), "--cpu-report-json", str(out), str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "CPU by file (core-seconds from /proc/stat)" in run.stdout
    assert "2 tests:" in run.stdout and "test_sample.py" in run.stdout
    rows = json.loads(out.read_text())
    busy = next(v for k, v in rows.items() if k.endswith("::test_busy"))
    idle = next(v for k, v in rows.items() if k.endswith("::test_idle"))
    assert len(rows) == 2 and busy[0] > 0 and busy[1] > 0
    assert busy[0] > idle[0]  # the loop takes measurably longer than an empty test
