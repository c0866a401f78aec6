"""``prore k8s render``: the operator's children printed by the CLI, with the verl command on request."""

from __future__ import annotations

import pytest
import yaml

from tests.operators.schemas import REPO

cli = pytest.importorskip("prore.cli")
EXAMPLE = REPO / "examples" / "k8s" / "grpo-ecommerce.yaml"


def test_render_prints_every_child(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["k8s", "render", str(EXAMPLE)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["kind"] for d in docs] == [
        "RayJob",
        "PlannerService",
        "InferenceService",
        "ScaledObject",
        "ServiceMonitor",
    ]


def test_show_command_resolves_the_entrypoint(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rl.verl.launch")
    assert cli.main(["k8s", "render", "--show-command", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("# python3 -m verl.trainer.main_ppo"))
    assert "trainer.nnodes=2" in line and "actor_rollout_ref.actor.clip_ratio_high=0.2" in line


def test_a_bad_resource_is_one_line_and_exit_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    bad = REPO / "tests" / "operators" / "data" / "sft-ecommerce.yaml"
    text = bad.read_text().replace("algorithm: sft", "algorithm: ppo")
    path = tmp_path / "bad.yaml"  # type: ignore[operator]
    path.write_text(text)
    assert cli.main(["k8s", "render", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error spec: spec.algorithm: must be one of sft, grpo, dapo; got 'ppo'"
    assert cli.main(["k8s", "render", str(tmp_path / "missing.yaml")]) == 2  # type: ignore[operator]
    assert capsys.readouterr().err.startswith("error k8s_file: no such file")
