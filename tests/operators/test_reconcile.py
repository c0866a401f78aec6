"""The reconcile steps through the in-memory client: creation, mirroring, promotion, cascade wiring,
and the kopf handlers' error translation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.errors import ApiUnavailable, SpecError
from operators.kube_fake import FakeKube
from operators.reconcile import (
    on_isvc_change,
    on_rayjob_change,
    read_step,
    reconcile_planner,
    reconcile_training,
)
from operators.render import render_documents
from tests.operators.schemas import REPO, validate

NOW = "2026-01-01T00:00:00Z"


def _job(kube: FakeKube, name: str = "grpo-ecommerce.yaml") -> dict[str, Any]:
    import yaml

    return kube.put(yaml.safe_load((REPO / "examples" / "k8s" / name).read_text()))


def _set_rayjob_status(kube: FakeKube, job: dict[str, Any], **status: Any) -> dict[str, Any]:
    rj = kube.objects[("RayJob", job["metadata"]["namespace"], job["metadata"]["name"])]
    rj["status"] = status
    return copy.deepcopy(rj)


def _claim(kube: FakeKube, namespace: str = "proretrieval") -> None:
    """The workspace claim a PlannerService's pods mount, as the chart creates it in the release's namespace."""
    kube.put({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
              "metadata": {"name": "proretrieval-workspace", "namespace": namespace}, "spec": {}})  # fmt: skip


def _stored(kube: FakeKube, job: dict[str, Any]) -> dict[str, Any]:
    found = kube.get("", job["kind"], job["metadata"]["namespace"], job["metadata"]["name"])
    assert found is not None
    return found


def test_a_new_job_gets_its_rayjob_owned_by_it() -> None:
    kube = FakeKube()
    job = _job(kube)
    status = reconcile_training(job, kube, NOW)
    assert kube.created == [("RayJob", "grpo-ecommerce")]
    rj = kube.objects[("RayJob", "proretrieval", "grpo-ecommerce")]
    assert rj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert status["phase"] == "Pending"
    assert status["checkpoint"] == "pvc://proretrieval-checkpoints/grpo-ecommerce"
    assert status["observedGeneration"] == 1
    reconcile_training(job, kube, NOW)  # resume after an operator restart: nothing new
    assert kube.created == [("RayJob", "grpo-ecommerce")]


def test_success_promotes_once_and_the_planner_gets_its_children() -> None:
    kube = FakeKube()
    job = _job(kube)
    reconcile_training(job, kube, NOW)
    rj = _set_rayjob_status(kube, job, jobDeploymentStatus="Running", jobStatus="RUNNING", jobId="raysubmit_1",
                            dashboardURL="grpo-head-svc.proretrieval.svc.cluster.local:8265")  # fmt: skip
    found = on_rayjob_change(rj, kube, NOW)
    assert found is not None
    owner, status = found
    assert owner["metadata"]["name"] == "grpo-ecommerce" and status["phase"] == "Running"
    kube.patch_status("", "RetrievalTrainingJob", "proretrieval", "grpo-ecommerce", status)
    kube.logs["raysubmit_1"] = "step:7 - actor/pg_loss:0.1\n"
    assert read_step(_stored(kube, job), kube) == 7

    rj = _set_rayjob_status(
        kube, job, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", jobId="raysubmit_1"
    )
    found = on_rayjob_change(rj, kube, NOW)
    assert found is not None
    _, status = found
    assert status["phase"] == "Succeeded" and status["plannerService"] == "planner-ecommerce"
    assert kube.created[-1] == ("PlannerService", "planner-ecommerce")
    on_rayjob_change(rj, kube, NOW)
    assert [k for k, _ in kube.created].count("PlannerService") == 1

    ps = kube.objects[("PlannerService", "proretrieval", "planner-ecommerce")]
    assert ps["metadata"]["ownerReferences"][0]["kind"] == "RetrievalTrainingJob"
    assert ps["spec"]["model"] == "pvc://proretrieval-checkpoints/grpo-ecommerce/final"
    validate(ps)
    _claim(kube)
    pstatus = reconcile_planner(copy.deepcopy(ps), kube, NOW)
    assert pstatus["phase"] == "Pending"
    assert [k for k, _ in kube.created[-3:]] == ["InferenceService", "ScaledObject", "ServiceMonitor"]
    for kind in ("InferenceService", "ScaledObject", "ServiceMonitor"):
        child = kube.objects[(kind, "proretrieval", "planner-ecommerce" if kind == "InferenceService"
                              else "planner-ecommerce-predictor")]  # fmt: skip
        assert child["metadata"]["ownerReferences"][0]["uid"] == ps["metadata"]["uid"]

    isvc = kube.objects[("InferenceService", "proretrieval", "planner-ecommerce")]
    isvc["status"] = {"url": "http://planner-ecommerce.proretrieval.example.com",
                      "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    found2 = on_isvc_change(copy.deepcopy(isvc), kube, NOW)
    assert found2 is not None and found2[1]["phase"] == "Ready"
    assert found2[1]["url"] == "http://planner-ecommerce.proretrieval.example.com"


def test_planner_spec_changes_reach_its_children() -> None:
    kube = FakeKube()
    ps = render_documents((REPO / "examples" / "k8s" / "planner-service.yaml").read_text())
    assert [o["kind"] for o in ps] == ["InferenceService", "ScaledObject", "ServiceMonitor"]
    import yaml

    planner = kube.put(yaml.safe_load((REPO / "examples" / "k8s" / "planner-service.yaml").read_text()))
    _claim(kube)
    reconcile_planner(planner, kube, NOW)
    planner["spec"]["autoscaling"]["maxReplicas"] = 9
    reconcile_planner(planner, kube, NOW)
    so = kube.objects[("ScaledObject", "proretrieval", "planner-ecommerce-predictor")]
    assert so["spec"]["maxReplicaCount"] == 9


def test_a_planner_service_without_the_workspace_claim_in_its_namespace_is_refused_with_a_condition() -> None:
    import yaml

    kube = FakeKube()
    _claim(kube, namespace="proretrieval")
    planner = yaml.safe_load((REPO / "examples" / "k8s" / "planner-service.yaml").read_text())
    planner["metadata"]["namespace"] = "team-a"
    planner = kube.put(planner)
    status = reconcile_planner(copy.deepcopy(planner), kube, NOW)
    assert kube.created == []  # no InferenceService whose pods could never start
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "WorkspaceClaimMissing")
    assert status["phase"] == "NotReady" and "team-a" in status["message"] and "\n" not in status["message"]
    assert "proretrieval-workspace" in status["message"]
    kube.patch_status(planner["apiVersion"], "PlannerService", "team-a", planner["metadata"]["name"], status)
    validate(
        kube.objects[("PlannerService", "team-a", planner["metadata"]["name"])]
    )  # the status fits the CRD
    # A claim of that name made in team-a (bound to the workspace's volume): the next reconcile creates the children.
    _claim(kube, namespace="team-a")
    status = reconcile_planner(copy.deepcopy(planner), kube, NOW)
    assert [k for k, _ in kube.created] == ["InferenceService", "ScaledObject", "ServiceMonitor"]
    assert status["phase"] == "Pending"


def test_an_unowned_rayjob_is_ignored() -> None:
    kube = FakeKube()
    assert on_rayjob_change({"metadata": {"name": "x", "namespace": "n"}, "status": {}}, kube, NOW) is None


def test_a_bad_job_creates_nothing() -> None:
    kube = FakeKube()
    job = kube.put({"apiVersion": "proretrieval.io/v1alpha1", "kind": "RetrievalTrainingJob",
                    "metadata": {"name": "bad"}, "spec": {"algorithm": "ppo", "model": "hf://q/m"}})  # fmt: skip
    with pytest.raises(SpecError):
        reconcile_training(job, kube, NOW)
    assert kube.created == []


def test_handlers_translate_errors_for_kopf() -> None:
    kopf = pytest.importorskip("kopf")
    from operators.handlers import translate

    @translate
    def bad(**_: Any) -> None:
        raise SpecError("must be at least 1, got 0", path="spec.resources.gpusPerNode")

    @translate
    def flaky(**_: Any) -> None:
        raise ApiUnavailable("Kubernetes API answered 503: Service Unavailable")

    with pytest.raises(
        kopf.PermanentError, match=r"^error spec: spec.resources.gpusPerNode: must be at least 1"
    ):
        bad()
    with pytest.raises(kopf.TemporaryError) as info:
        flaky()
    assert info.value.delay == ApiUnavailable.delay_s


def test_handlers_register_no_deletion_handler_so_no_finalizer() -> None:
    pytest.importorskip("kopf")
    import inspect

    import operators.handlers as h

    source = inspect.getsource(h)
    assert "kopf.on.delete" not in source and "finalizer" not in source.replace("no finalizers", "")
