"""A training run killed in the middle resumes from its latest complete checkpoint with exact step counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexing.workspace import Workspace
from rl.train.logs import checkpoints, read_metrics
from tests.rl.train_support import TINY

STEPS = 12


def _sft(ws: Workspace, out: Path) -> list[str]:
    return [sys.executable, "-m", "prore", "--workspace", str(ws.root), "train", "sft", *TINY,
            "--max-steps", str(STEPS), "--out", str(out), "--domain", "ecommerce"]  # fmt: skip


@pytest.mark.slow
def test_a_killed_sft_run_resumes_with_exact_step_counts(train_bench: Workspace, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PRORE_TRAIN_THREADS": "1"}
    proc = subprocess.Popen(
        _sft(train_bench, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 900
    while not any(step >= 3 for step, _ in checkpoints(out)):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(step for step, _ in checkpoints(out))
    assert killed_at < STEPS

    done = subprocess.run(_sft(train_bench, out), env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert summary["resumed_from"].endswith(f"checkpoint-{killed_at}")
    logged = [r["step"] for r in read_metrics(out) if "loss" in r]
    assert logged == list(range(1, STEPS + 1)), "every step logged exactly once across the kill"
    assert sorted(r["step"] for r in read_metrics(out) if "eval_loss" in r) == list(range(3, STEPS + 1, 3))
