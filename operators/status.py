"""Reconcile, status: a RayJob's status becomes its RetrievalTrainingJob's (pure functions).

KubeRay 1.7.0 reports two fields (``ray-operator/apis/ray/v1/rayjob_types.go``): ``jobStatus``, the
Ray job's own state, and ``jobDeploymentStatus``, KubeRay's lifecycle of cluster and submission. The
CRD leaves both as free strings (its only enums are the deletion rules' ``SUCCEEDED``/``FAILED`` and
``Failed``), so the complete value sets are copied here from that file, and :func:`phase` maps every
pair. A value from a newer KubeRay maps to ``Unknown`` with a message rather than failing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JOB_STATUSES: tuple[str, ...] = ("", "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED")
"""``AllJobStatuses`` of KubeRay 1.7.0 ("" is ``JobStatusNew``)."""
JOB_DEPLOYMENT_STATUSES: tuple[str, ...] = (
    "",
    "Initializing",
    "Running",
    "Complete",
    "Failed",
    "ValidationFailed",
    "Suspending",
    "Suspended",
    "Retrying",
    "Waiting",
)
"""``JobDeploymentStatus`` constants of KubeRay 1.7.0 ("" is ``JobDeploymentStatusNew``)."""
FAILED_REASONS: tuple[str, ...] = (
    "SubmissionFailed",
    "DeadlineExceeded",
    "PreRunningDeadlineExceeded",
    "AppFailed",
    "JobDeploymentStatusTransitionGracePeriodExceeded",
    "JobStatusCheckTimeoutExceeded",
    "ValidationFailed",
)
"""``JobFailedReason`` constants of KubeRay 1.7.0."""

PHASES = ("Pending", "Initializing", "Running", "Retrying", "Suspending", "Suspended", "Succeeded", "Failed",
          "Unknown")  # fmt: skip
TERMINAL = ("Succeeded", "Failed")

_HINTS = {
    "PreRunningDeadlineExceeded": "the Ray cluster did not start in time: check GPU quota, node selectors "
    "(kubectl describe pod) and image pulls",
    "DeadlineExceeded": "the run passed spec.run.activeDeadlineSeconds",
    "SubmissionFailed": "ray job submit failed: see the submitter Job's log",
    "ValidationFailed": "KubeRay refused the RayJob: see its events",
    "Failed": "KubeRay marked the RayJob Failed: see kubectl describe rayjob",
}


@dataclass(frozen=True)
class Observed:
    """What the status of a RetrievalTrainingJob says about its RayJob, before conditions."""

    phase: str
    reason: str | None = None
    message: str | None = None


def phase(job_deployment_status: str, job_status: str, reason: str = "", message: str = "") -> Observed:
    """The training phase of a RayJob in state (``jobDeploymentStatus``, ``jobStatus``)."""
    d, j = job_deployment_status or "", job_status or ""
    if d not in JOB_DEPLOYMENT_STATUSES or j not in JOB_STATUSES:
        return Observed(
            "Unknown",
            "UnknownRayJobStatus",
            f"KubeRay reports jobDeploymentStatus '{d}', jobStatus '{j}', unknown to this operator",
        )
    if d in ("Failed", "ValidationFailed"):
        why = reason or ("ValidationFailed" if d == "ValidationFailed" else "Failed")
        hint = _HINTS.get(why, "")
        text = "; ".join(t for t in (message, hint) if t) or None
        return Observed("Failed", why, text)
    if d == "Complete" or j in ("SUCCEEDED", "FAILED", "STOPPED"):
        if j == "SUCCEEDED":
            return Observed("Succeeded", "Succeeded", message or None)
        if j == "STOPPED":
            return Observed("Failed", "Stopped", message or "the Ray job was stopped")
        if j == "FAILED":
            return Observed("Failed", reason or "AppFailed", message or "the trainer exited with an error: see the "
                            "Ray job's log on the dashboard")  # fmt: skip
        return Observed("Failed", reason or "SubmissionFailed", message or _HINTS["SubmissionFailed"])
    if d == "":
        return Observed("Pending")
    if d in ("Initializing", "Waiting"):
        return Observed("Initializing", None, message or None)
    if d == "Running":
        return Observed("Running" if j == "RUNNING" else "Initializing")
    return Observed(d)  # Retrying, Suspending, Suspended


_STEP = re.compile(r"(?m)^.*?\bstep:(\d+) - ")


def parse_step(log: str) -> int | None:
    """The newest step in a verl console log (its metrics lines read ``step:N - key:value - ...``).

    >>> parse_step("step:1 - actor/lr:1e-06\\n(TaskRunner) step:2 - critic/score/mean:1.5\\n")
    2
    >>> parse_step("starting") is None
    True
    """
    found = _STEP.findall(log)
    return int(found[-1]) if found else None


def _condition(type_: str, on: bool, reason: str, message: str, prev: Mapping[str, Any] | None,
               now: str) -> dict[str, Any]:  # fmt: skip
    status = "True" if on else "False"
    since = prev.get("lastTransitionTime", now) if prev and prev.get("status") == status else now
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def conditions(observed: Observed, previous: Sequence[Mapping[str, Any]], now: str, *,
               promoted: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Running, Succeeded, Failed (and Promoted once a PlannerService exists); a transition time moves
    only when that condition's status changes."""
    prev = {str(c.get("type")): c for c in previous}
    p = observed.phase
    out = [
        _condition("Running", p == "Running", p, "", prev.get("Running"), now),
        _condition("Succeeded", p == "Succeeded", p, observed.message or "", prev.get("Succeeded"), now),
        _condition(
            "Failed", p == "Failed", observed.reason or p, observed.message or "", prev.get("Failed"), now
        ),
    ]
    if promoted:
        out.append(_condition("Promoted", True, "PlannerServiceCreated", f"PlannerService {promoted}",
                              prev.get("Promoted"), now))  # fmt: skip
    return out


def training_status(rayjob: Mapping[str, Any], previous: Mapping[str, Any], now: str, *,
                    step: int | None = None, checkpoint: str | None = None,
                    promoted: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The new ``status`` of a RetrievalTrainingJob from its RayJob (``rayjob``: the whole object).

    ``previous`` is the job's current status: the step and transition times it holds are kept when
    the RayJob says nothing new.
    """
    rs = rayjob.get("status") or {}
    obs = phase(str(rs.get("jobDeploymentStatus", "")), str(rs.get("jobStatus", "")),
                str(rs.get("reason", "")), str(rs.get("message", "")))  # fmt: skip
    out: dict[str, Any] = {
        "phase": obs.phase,
        "rayJob": rayjob.get("metadata", {}).get("name"),
        "jobId": rs.get("jobId") or None,
        "dashboardURL": _dashboard(rs.get("dashboardURL")),
        "checkpoint": checkpoint or previous.get("checkpoint"),
        "step": step if step is not None else previous.get("step"),
        "reason": obs.reason,
        "message": obs.message,
        "plannerService": promoted or previous.get("plannerService"),
        "conditions": conditions(obs, previous.get("conditions") or [], now,
                                 promoted=promoted or previous.get("plannerService")),
    }  # fmt: skip
    return {k: v for k, v in out.items() if v is not None}


def _dashboard(value: Any) -> str | None:
    if not value:
        return None
    text = str(value)
    return text if "://" in text else f"http://{text}"


def phase_event(old: str | None, new: str) -> tuple[str, str, str] | None:
    """The event (type, reason, message) a phase change is worth, or None when nothing changed."""
    if old == new:
        return None
    kind = "Warning" if new in ("Failed", "Unknown") else "Normal"
    return kind, f"Training{new}", f"phase {old or 'none'} -> {new}"


def planner_status(
    isvc: Mapping[str, Any], now: str, previous: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The ``status`` of a PlannerService from its InferenceService's ``Ready`` condition and URL."""
    s = isvc.get("status") or {}
    ready = next((c for c in s.get("conditions") or [] if c.get("type") == "Ready"), None)
    ok = bool(ready and ready.get("status") == "True")
    phase_ = "Ready" if ok else ("NotReady" if ready else "Pending")
    message = str(ready.get("message") or ready.get("reason") or "") if ready and not ok else ""
    prev = {str(c.get("type")): c for c in previous}
    out: dict[str, Any] = {
        "phase": phase_,
        "inferenceService": isvc.get("metadata", {}).get("name"),
        "url": s.get("url") or None,
        "message": message or None,
        "conditions": [_condition("Ready", ok, phase_, message, prev.get("Ready"), now)],
    }
    return {k: v for k, v in out.items() if v is not None}


CLAIM_MISSING = "WorkspaceClaimMissing"
"""The ``Ready`` condition's reason while the PlannerService's namespace has no workspace claim."""


def claim_missing_status(namespace: str, claim: str, now: str,
                         previous: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
    """The ``status`` of a PlannerService whose namespace has no PersistentVolumeClaim ``claim``: its pods
    would mount the workspace from it, and a pod mounts only a claim of its own namespace, so nothing is created."""
    message = (
        f"PersistentVolumeClaim {claim} is not in namespace {namespace}, and a pod mounts only a claim of its own "
        f"namespace: create the PlannerService in the workspace's namespace, or a claim named {claim} in "
        f"{namespace} bound to the workspace's volume (ReadOnlyMany), then change the PlannerService's spec"
    )
    prev = {str(c.get("type")): c for c in previous}
    return {
        "phase": "NotReady",
        "message": message,
        "conditions": [_condition("Ready", False, CLAIM_MISSING, message, prev.get("Ready"), now)],
    }
