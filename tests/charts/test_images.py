"""Smoke test of the images `make images` builds (Containerfile), run inside each image with `buildah run`.

Each image's entrypoint answers ``--help``, it runs as the chart's non-root user, its tag is Chart.yaml's
appVersion and it is the name the chart and the operator use. Marked slow; an image that `make images`
has not built on this machine is skipped with that reason, so the suite runs where buildah or the images
are absent (CI does not build them: about half an hour of the two cores).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from operators.settings import OperatorSettings
from tests.charts.chart import CHART

pytestmark = pytest.mark.slow

BUILDAH = ["buildah", "--storage-driver", "vfs"]
VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
RUN_AS = VALUES["podSecurityContext"]["runAsUser"]


def _image_names() -> dict[str, str]:
    """The image of each Containerfile target, as the chart's values and the operator's defaults name it."""
    settings = OperatorSettings()
    return {
        "app": f"{VALUES['image']['repository']}:{VERSION}",
        "transformer": settings.transformer_image,
        "operator": f"{VALUES['operator']['image']['repository']}:{VERSION}",
        "train": settings.training_image,
    }


IMAGES = _image_names()


def _buildah(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def _container(target: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A working container of the built image of ``target``, and the image's OCI config; removed afterwards.
    Skips the test where buildah or the image is missing."""
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (make images installs nothing; apt-get install buildah)")
    name = IMAGES[target]
    found = _buildah("inspect", "--type", "image", name)
    if found.returncode != 0:
        pytest.skip(f"{name} is not built here: run `make images` first")
    ctr = _buildah("from", "--pull-never", name).stdout.strip()
    try:
        yield ctr, json.loads(found.stdout)["OCIv1"]["config"]
    finally:
        _buildah("rm", ctr)


@pytest.fixture(params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """A working container of one built image: (target, container, the image's OCI config)."""
    with _container(request.param) as (ctr, config):
        yield request.param, ctr, config


def _run(ctr: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return _buildah("run", "--isolation", "chroot", ctr, "--", *cmd)


def test_every_image_is_tagged_with_the_charts_app_version() -> None:
    assert VERSION
    for target, name in IMAGES.items():
        assert name.endswith(f":{VERSION}"), (target, name)


def test_the_entrypoint_answers_help_as_the_non_root_user(image: tuple[str, str, dict[str, Any]]) -> None:
    target, ctr, config = image
    assert config.get("User") == f"{RUN_AS}:{RUN_AS}", config.get("User")
    command = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    assert "--help" in command, command
    ran = _run(ctr, *command)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "usage" in ran.stdout.lower(), ran.stdout[:500]
    uid = _run(ctr, "python", "-c", "import os; print(os.getuid(), os.getgid())")
    assert uid.stdout.split() == [str(RUN_AS), str(RUN_AS)], (target, uid.stdout, uid.stderr[-500:])


def test_the_app_image_embeds_with_its_own_minilm_offline() -> None:
    code = (
        "from indexing.config import EmbedderConfig; from indexing.embedders.registry import make_embedder;"
        "from indexing.schema import Role; import numpy as np;"
        "v = make_embedder(EmbedderConfig(), Role.TEXT).embed(['noise cancelling headphones']);"
        "print(v.shape[1], round(float(np.linalg.norm(v[0])), 3))"
    )
    with _container("app") as (ctr, _):
        ran = _run(ctr, "python", "-c", code)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split()[-2:] == ["384", "1.0"], ran.stdout


def test_the_train_image_holds_verls_trainer_and_prints_the_rayjobs_entrypoint() -> None:
    """The RayJob's entrypoint is ``prore train launch ...`` in the train image: verl 0.9.1's trainer and the
    project's CPU plugin import there under verl's own transformers bound, beside Ray, and the launch composes
    verl's ``main_ppo`` command line."""
    from packaging.version import Version

    code = (
        "import ray, transformers, verl, verl.trainer.main_ppo, rl.verl.cpu;"
        "print(verl.__version__, ray.__version__, transformers.__version__)"
    )
    with _container("train") as (ctr, _):
        ran = _run(ctr, "python", "-c", code)
        launch = _run(ctr, "prore", "train", "launch", "dapo", "--print")
    assert ran.returncode == 0, ran.stderr[-2000:]
    verl_version, ray_version, transformers_version = ran.stdout.split()[-3:]
    assert verl_version == "0.9.1" and ray_version.startswith("2."), ran.stdout
    # verl 0.9.1's bound (scripts/verl-constraints.txt), which .venv's vLLM and TRL do not keep
    assert Version(transformers_version) < Version("5.11"), transformers_version
    assert launch.returncode == 0, launch.stderr[-2000:]
    assert "-m verl.trainer.main_ppo" in launch.stdout, launch.stdout[:500]
