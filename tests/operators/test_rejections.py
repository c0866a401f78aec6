"""Bad resources are refused with one clear message: by the CRD schema (the API server) where it can,
by the operator otherwise."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.errors import SpecError
from operators.promotion import planner_spec
from operators.reconcile import check_update
from operators.render import render_documents
from operators.training import spec_of
from tests.operators.schemas import errors_of

GOOD: dict[str, Any] = {
    "apiVersion": "proretrieval.io/v1alpha1",
    "kind": "RetrievalTrainingJob",
    "metadata": {"name": "j", "namespace": "ns"},
    "spec": {"algorithm": "grpo", "model": "hf://Qwen/Qwen3-4B"},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = obj["spec"]
    for p in parents:
        node = node.setdefault(p, {})
    if value is None:
        node.pop(last)
    else:
        node[last] = value
    return obj


def test_the_good_resource_passes_both() -> None:
    assert errors_of(GOOD) == []
    spec_of(GOOD)


@pytest.mark.parametrize(
    ("path", "value", "schema_says", "operator_says"),
    [
        ("algorithm", "ppo", "'ppo' is not one of ['sft', 'grpo', 'dapo']",
         "spec.algorithm: must be one of sft, grpo, dapo; got 'ppo'"),
        ("resources.gpusPerNode", 0, "0 is less than the minimum of 1", "spec.resources.gpusPerNode: must be at least 1, got 0"),
        ("model", None, "'model' is a required property", "spec.model: is required"),
        ("model", "Qwen/Qwen3-4B", "does not match", "spec.model: 'Qwen/Qwen3-4B' does not match"),
        ("checkpoints", "s3://bucket/ckpt", "does not match", "spec.checkpoints: 's3://bucket/ckpt' does not match"),
        ("resources.nodes", "two", "'two' is not of type 'integer'", "spec.resources.nodes: must be an integer, got 'two'"),
    ],
)  # fmt: skip
def test_rejected_by_schema_and_operator(path: str, value: Any, schema_says: str, operator_says: str) -> None:
    bad = _with(path, value)
    errors = errors_of(bad)
    assert len(errors) == 1 and schema_says in errors[0]
    with pytest.raises(SpecError) as info:
        spec_of(bad)
    assert info.value.one_line().startswith(f"error spec: {operator_says}")
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("hyperparameters.rollouts", 8, "spec.hyperparameters.rollouts: does not apply to sft"),
        ("hyperparameters.dynamicSampling", True, "spec.hyperparameters.dynamicSampling: dynamic sampling belongs to dapo"),
        ("overrides", ["trainer.save_freq"], "spec.overrides[0]: 'trainer.save_freq' is not KEY=VALUE"),
        ("promote", {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.promote.autoscaling: minReplicas is above maxReplicas"),
    ],
)  # fmt: skip
def test_rejected_by_the_operator_where_the_schema_cannot(path: str, value: Any, message: str) -> None:
    bad = _with(path, value)
    if path == "hyperparameters.rollouts" or path == "hyperparameters.dynamicSampling":
        bad["spec"]["algorithm"] = "sft" if path.endswith("rollouts") else "grpo"
    assert errors_of(bad) == []
    with pytest.raises(SpecError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        spec_of(bad)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"promote": {"plannerCard": True}},
         "spec.promote.plannerCard: plannerCard needs spec.model to be the planner directory"),
        ({"algorithm": "sft", "model": "pvc://m/planner", "promote": {"plannerCard": True}},
         "spec.promote.plannerCard: plannerCard carries the card of the planner an RL run started from"),
        ({"model": "pvc://m/planner", "promote": {"fusion": {"fuse": "self-query", "gate": "familiar"}}},
         "spec.promote.fusion.gate: fusion gate familiar reads the planner card's training requests"),
        ({"model": "pvc://m/planner", "promote": {"transformer": False, "plannerCard": True}},
         "spec.promote.transformer: fusion and plannerCard are the transformer's"),
    ],
)  # fmt: skip
def test_a_promotion_the_served_planner_cannot_honour_is_refused(spec: dict[str, Any], message: str) -> None:
    bad = copy.deepcopy(GOOD)
    bad["spec"].update(spec)
    assert errors_of(bad) == []
    with pytest.raises(SpecError, match="^" + message):
        spec_of(bad)


def test_unknown_field_is_named() -> None:
    with pytest.raises(SpecError, match=r"spec.resources.gpus: unknown field; known fields are gpuType"):
        spec_of(_with("resources.gpus", 8))


def test_planner_service_rejections() -> None:
    ps = {"apiVersion": "proretrieval.io/v1alpha1", "kind": "PlannerService", "metadata": {"name": "p"},
          "spec": {"model": "pvc://c/m", "autoscaling": {"minReplicas": 3, "maxReplicas": 1}}}  # fmt: skip
    with pytest.raises(SpecError, match="minReplicas is above maxReplicas"):
        planner_spec(ps)
    ps["spec"] = {"gpus": 1}
    assert errors_of(ps) == ["spec: 'model' is a required property"]
    ps["spec"] = {"model": "pvc://c/m", "fusion": {"fuse": "self-query", "gate": "familiar"}}
    with pytest.raises(SpecError, match=r"^spec.fusion.gate: fusion gate familiar reads the planner card's"):
        planner_spec(ps)
    ps["spec"] = {"model": "pvc://c/m", "transformer": False, "fusion": {"guidedSamples": 8}}
    with pytest.raises(SpecError, match=r"^spec.transformer: fusion and plannerCard are the transformer's"):
        planner_spec(ps)
    ps["spec"] = {"model": "pvc://c/m", "fusion": {"gate": "majority"}}
    assert errors_of(ps)[0].startswith("spec.fusion.gate: 'majority' is not one of")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"runtime": "seq2seq", "plannerOutput": "grounded"},
         r"spec\.promptProfile: promptProfile request is the encoder-decoder planner's.*runtime seq2seq with "
         r"promptProfile full"),
        ({"promptProfile": "request"}, r"spec\.promptProfile: .*runtime vllm with promptProfile request"),
        ({"runtime": "seq2seq", "promptProfile": "request"},
         r"spec\.plannerOutput: runtime seq2seq decodes under a grammar .* not under the JSON schema"),
    ],
)  # fmt: skip
def test_a_seq2seq_planner_service_must_read_the_request_profile_under_a_grammar(
    spec: dict[str, Any], says: str
) -> None:
    """The encoder-decoder's model server reads only the request profile and refuses the JSON schema (400
    ``bad_chat``): a PlannerService that would fall back on every request is refused when it is applied."""
    fields: dict[str, Any] = {"model": "pvc://c/m", **spec}
    ps = {"apiVersion": "proretrieval.io/v1alpha1", "kind": "PlannerService", "metadata": {"name": "p"},
          "spec": fields}  # fmt: skip
    assert errors_of(ps) == []  # each field is valid alone: the operator checks them together
    with pytest.raises(SpecError, match=says):
        planner_spec(ps)
    fields["runtime"] = "tgi"
    assert errors_of(ps) == ["spec.runtime: 'tgi' is not one of ['vllm', 'seq2seq']"]


def test_render_refuses_other_kinds() -> None:
    with pytest.raises(SpecError, match=r"expected apiVersion proretrieval\.io/v1alpha1, got 'v1'"):
        render_documents("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(SpecError, match=r"^not YAML"):
        render_documents("a: [")


def test_running_job_spec_is_fixed_except_promotion() -> None:
    check_update({"algorithm": "grpo"}, {"algorithm": "grpo", "promote": {}})
    with pytest.raises(SpecError, match=r"spec\.resources: cannot change once the RayJob exists"):
        check_update({"algorithm": "grpo"}, {"algorithm": "grpo", "resources": {"nodes": 4}})
