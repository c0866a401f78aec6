"""Status mapping: every KubeRay 1.7.0 jobDeploymentStatus x jobStatus pair maps to one phase."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml

from operators.api import TrainingStatus
from operators.schema import load
from operators.status import (
    FAILED_REASONS,
    JOB_DEPLOYMENT_STATUSES,
    JOB_STATUSES,
    PHASES,
    TERMINAL,
    conditions,
    parse_step,
    phase,
    phase_event,
    planner_status,
    training_status,
)
from tests.operators.schemas import UPSTREAM_CRDS

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T01:00:00Z"


def _crd_enums() -> dict[str, set[str]]:
    """Enums the RayJob CRD itself gives for the two fields (only in its deletion rules)."""
    crd = yaml.load((UPSTREAM_CRDS / "kuberay-rayjob.yaml").read_text(), Loader=yaml.CSafeLoader)
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    rule = v1["properties"]["spec"]["properties"]["deletionStrategy"]["properties"]["deletionRules"]["items"]
    cond = rule["properties"]["condition"]["properties"]
    return {
        "jobStatus": set(cond["jobStatus"]["enum"]),
        "jobDeploymentStatus": set(cond["jobDeploymentStatus"]["enum"]),
    }


def test_the_crd_enums_are_within_the_mapped_values() -> None:
    enums = _crd_enums()
    assert enums["jobStatus"] <= set(JOB_STATUSES)
    assert enums["jobDeploymentStatus"] <= set(JOB_DEPLOYMENT_STATUSES)


@pytest.mark.parametrize(
    ("deployment", "job"), list(itertools.product(JOB_DEPLOYMENT_STATUSES, JOB_STATUSES))
)
def test_every_pair_maps_to_a_known_phase(deployment: str, job: str) -> None:
    obs = phase(deployment, job)
    assert obs.phase in PHASES and obs.phase != "Unknown"
    if obs.phase == "Failed":
        assert obs.reason and obs.message


@pytest.mark.parametrize(
    ("deployment", "job", "expected"),
    [
        ("", "", "Pending"),
        ("Initializing", "", "Initializing"),
        ("Waiting", "", "Initializing"),
        ("Running", "PENDING", "Initializing"),
        ("Running", "RUNNING", "Running"),
        ("Running", "SUCCEEDED", "Succeeded"),
        ("Complete", "SUCCEEDED", "Succeeded"),
        ("Complete", "FAILED", "Failed"),
        ("Complete", "STOPPED", "Failed"),
        ("Complete", "", "Failed"),
        ("Failed", "", "Failed"),
        ("ValidationFailed", "", "Failed"),
        ("Retrying", "FAILED", "Failed"),
        ("Retrying", "", "Retrying"),
        ("Suspending", "RUNNING", "Suspending"),
        ("Suspended", "", "Suspended"),
    ],
)
def test_phase(deployment: str, job: str, expected: str) -> None:
    assert phase(deployment, job).phase == expected


@pytest.mark.parametrize("reason", FAILED_REASONS)
def test_failed_keeps_kuberays_reason(reason: str) -> None:
    obs = phase("Failed", "", reason, "boom")
    assert (obs.phase, obs.reason) == ("Failed", reason)
    assert obs.message and obs.message.startswith("boom")


def test_stuck_initializing_says_what_to_check() -> None:
    obs = phase("Failed", "", "PreRunningDeadlineExceeded", "")
    assert obs.message and "GPU quota" in obs.message


def test_an_unknown_value_is_reported_not_raised() -> None:
    obs = phase("Exploded", "RUNNING")
    assert obs.phase == "Unknown" and obs.message and "Exploded" in obs.message


def _rayjob(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "status": status}


def test_training_status_mirrors_the_rayjob_and_types_check() -> None:
    rj = _rayjob(jobDeploymentStatus="Running", jobStatus="RUNNING", jobId="j-abc",
                 dashboardURL="j-head-svc.ns.svc.cluster.local:8265")  # fmt: skip
    s = training_status(rj, {}, NOW, step=12, checkpoint="pvc://c/j")
    assert s["phase"] == "Running" and s["step"] == 12 and s["jobId"] == "j-abc"
    assert s["dashboardURL"] == "http://j-head-svc.ns.svc.cluster.local:8265"
    assert s["checkpoint"] == "pvc://c/j" and s["rayJob"] == "j"
    assert {c["type"]: c["status"] for c in s["conditions"]} == {"Running": "True", "Succeeded": "False",
                                                                  "Failed": "False"}  # fmt: skip
    load(TrainingStatus, s, "status")  # the status is what the CRD's status schema describes


def test_step_and_transition_times_survive_an_event_without_news() -> None:
    first = training_status(_rayjob(jobDeploymentStatus="Running", jobStatus="RUNNING"), {}, NOW, step=3)
    again = training_status(_rayjob(jobDeploymentStatus="Running", jobStatus="RUNNING"), first, LATER)
    assert again["step"] == 3
    assert again["conditions"] == first["conditions"]
    done = training_status(_rayjob(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED"), again, LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in done["conditions"]}
    assert times == {"Running": LATER, "Succeeded": LATER, "Failed": NOW}
    assert done["phase"] in TERMINAL


def test_promoted_condition() -> None:
    c = conditions(phase("Complete", "SUCCEEDED"), [], NOW, promoted="planner")
    assert c[-1]["type"] == "Promoted" and c[-1]["status"] == "True"


def test_parse_step_takes_the_newest_metrics_line() -> None:
    log = "(TaskRunner pid=1) step:0 - val-core/x:0.1\nwarming\n(TaskRunner pid=1) step:41 - actor/lr:1e-06\n"
    assert parse_step(log) == 41
    assert parse_step("Training Progress: 3%") is None


def test_phase_events() -> None:
    assert phase_event("Running", "Running") is None
    assert phase_event("Running", "Failed") == ("Warning", "TrainingFailed", "phase Running -> Failed")
    assert phase_event(None, "Pending") == ("Normal", "TrainingPending", "phase none -> Pending")


def test_planner_status() -> None:
    isvc = {"metadata": {"name": "p"}, "status": {"url": "http://p.ns.example.com",
                                                  "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    assert planner_status(isvc, NOW)["phase"] == "Ready"
    assert planner_status({"metadata": {"name": "p"}}, NOW)["phase"] == "Pending"
    not_ready = {"metadata": {"name": "p"}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ModelLoadFailed"}]}}  # fmt: skip
    s = planner_status(not_ready, NOW)
    assert (s["phase"], s["message"]) == ("NotReady", "ModelLoadFailed")
