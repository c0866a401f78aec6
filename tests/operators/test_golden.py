"""Golden manifests: what the operator creates for each algorithm and for a promotion, byte for byte.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/operators/test_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from operators.render import render_documents, to_yaml
from tests.operators.schemas import DATA, REPO, validate

EXAMPLES = REPO / "examples" / "k8s"
CASES = {
    "grpo-ecommerce": EXAMPLES / "grpo-ecommerce.yaml",
    "dapo-email": EXAMPLES / "dapo-email.yaml",
    "dapo-from-planner": EXAMPLES / "dapo-from-planner.yaml",
    "sft-ecommerce": DATA / "sft-ecommerce.yaml",
    "planner-service": EXAMPLES / "planner-service.yaml",
    "planner-service-seq2seq": EXAMPLES / "planner-service-seq2seq.yaml",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_children_match_golden(name: str) -> None:
    rendered = to_yaml(render_documents(CASES[name].read_text()))
    golden = DATA / "golden" / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_child_and_input_matches_its_schema(name: str) -> None:
    text = CASES[name].read_text()
    validate(yaml.safe_load(text))
    children = render_documents(text)
    assert children
    for child in children:
        validate(child)


def test_each_algorithm_has_a_golden_case() -> None:
    algorithms = {yaml.safe_load(p.read_text())["spec"].get("algorithm") for p in CASES.values()}
    assert {"sft", "grpo", "dapo"} <= algorithms


def _kinds(path: Path) -> list[str]:
    return [o["kind"] for o in render_documents(path.read_text())]


def test_promotion_adds_the_planner_and_its_children() -> None:
    assert _kinds(CASES["grpo-ecommerce"]) == ["RayJob", "PlannerService", "InferenceService", "ScaledObject",
                                               "ServiceMonitor"]  # fmt: skip
    assert _kinds(CASES["dapo-email"]) == ["RayJob"]
