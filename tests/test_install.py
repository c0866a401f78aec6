"""``scripts/pip-install.sh``, which installs both environments: uv does the work, with what pip is
configured with handed to it (uv reads no pip.conf and no ``PIP_*`` variable itself)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "scripts" / "pip-install.sh"
VENV = Path(sys.prefix)


def _install(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # --dry-run --offline: resolve against what is installed and cached, change nothing, fetch nothing
    return subprocess.run(
        ["bash", str(SCRIPT), str(VENV), "--dry-run", "--offline", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _uv_installed() -> None:
    if not (VENV / "bin" / "uv").is_file():
        pytest.skip("this environment was not installed by scripts/pip-install.sh (no uv in it)")


def test_uv_installs_what_is_asked_without_falling_back_to_pip() -> None:
    run = _install("pyyaml")
    assert run.returncode == 0, run.stderr
    assert "installing with pip" not in run.stderr


def test_pips_constraints_reach_uv(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("pyyaml<1\n")
    run = _install("pyyaml", env={"PIP_CONSTRAINT": str(constraints)})
    assert run.returncode != 0, "an unsatisfiable constraint pip is configured with must stop the install"
    assert "pyyaml<1" in run.stderr, run.stderr  # uv's own resolver names the constraint it was handed
