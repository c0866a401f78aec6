"""The reconcile steps: pure functions of :mod:`operators.training`, :mod:`operators.status` and
:mod:`operators.promotion`, applied through a :class:`~operators.kube.Kube` client.

Each step reads what exists, creates what is missing (never replaces a child: KubeRay treats a
RayJob's spec as fixed once it runs), and returns the parent's new ``status``. The kopf handlers
(:mod:`operators.handlers`) only call these and turn their errors into kopf's.
"""

from __future__ import annotations

from typing import Any

from operators.api import API_VERSION, PLANNER_SERVICE, TRAINING_JOB
from operators.errors import ApiUnavailable, SpecError
from operators.kube import Kube
from operators.promotion import planner_children, planner_service, planner_spec
from operators.settings import OperatorSettings
from operators.status import claim_missing_status, parse_step, planner_status, training_status
from operators.training import RAY_API_VERSION, checkpoint_uri, rayjob, spec_of

MUTABLE_AFTER_START = ("promote",)
"""Spec fields a running job may still change: promotion is read only when the run succeeds."""


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or "default"), str(meta["name"])


def check_update(old_spec: dict[str, Any] | None, new_spec: dict[str, Any] | None) -> None:
    """Refuse a spec change the running RayJob cannot follow (only ``promote`` may change)."""
    old, new = dict(old_spec or {}), dict(new_spec or {})
    changed = sorted(
        k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in MUTABLE_AFTER_START
    )
    if changed:
        raise SpecError("cannot change once the RayJob exists; delete the job and apply it again",
                        path=f"spec.{changed[0]}")  # fmt: skip


def reconcile_training(job: dict[str, Any], kube: Kube, now: str, settings: Any = None) -> dict[str, Any]:
    """Create the RayJob of ``job`` when missing, then mirror it: the job's new status."""
    spec = spec_of(job)
    namespace, name = _ns_name(job)
    found = kube.get(RAY_API_VERSION, "RayJob", namespace, name)
    if found is None:
        found = kube.create(rayjob(job, settings))
    status = sync_training(job, found, kube, now, settings)
    status.setdefault("checkpoint", checkpoint_uri(job, spec))
    status["observedGeneration"] = job["metadata"].get("generation")
    return {k: v for k, v in status.items() if v is not None}


def sync_training(job: dict[str, Any], ray_job: dict[str, Any], kube: Kube, now: str, settings: Any = None,
                  *, step: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The job's status from its RayJob; on success with ``promote``, create the PlannerService first."""
    spec = spec_of(job)
    previous = job.get("status") or {}
    promoted: str | None = None
    rs = ray_job.get("status") or {}
    if rs.get("jobStatus") == "SUCCEEDED" and spec.promote is not None:
        ps = planner_service(job, settings)
        if ps is not None:
            kube.create(ps)
            promoted = str(ps["metadata"]["name"])
    return training_status(ray_job, previous, now, step=step, checkpoint=checkpoint_uri(job, spec),
                           promoted=promoted)  # fmt: skip


def read_step(job: dict[str, Any], kube: Kube) -> int | None:
    """The newest step of a running job, from its Ray job's log; None when the dashboard is not known yet."""
    s = job.get("status") or {}
    if not s.get("dashboardURL") or not s.get("jobId"):
        return None
    try:
        return parse_step(kube.job_log(str(s["dashboardURL"]), str(s["jobId"])))
    except ApiUnavailable:
        return None  # the next tick tries again; a missing step is not an error


def owner_name(child: dict[str, Any], kind: str) -> str | None:
    """Name of the ``kind`` that owns ``child`` (from its controller owner reference)."""
    for ref in child.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("apiVersion") == API_VERSION:
            return str(ref["name"])
    return None


def on_rayjob_change(ray_job: dict[str, Any], kube: Kube, now: str, settings: Any = None) -> tuple[dict[str, Any],
                                                                                                   dict[str, Any]] | None:  # fmt: skip
    """(owner, new owner status) after a RayJob event; None when no RetrievalTrainingJob owns it."""
    owner = owner_name(ray_job, TRAINING_JOB.kind)
    if owner is None:
        return None
    namespace, _ = _ns_name(ray_job)
    job = kube.get(API_VERSION, TRAINING_JOB.kind, namespace, owner)
    if job is None:
        return None  # being deleted: the RayJob goes with it
    return job, sync_training(job, ray_job, kube, now, settings)


def reconcile_planner(ps: dict[str, Any], kube: Kube, now: str, settings: Any = None) -> dict[str, Any]:
    """Create the InferenceService, ScaledObject and ServiceMonitor of ``ps``, or bring their specs up to
    date with it (replica bounds, model, GPUs); the PlannerService's status. A namespace without the workspace
    claim gets nothing, and a ``Ready`` condition that says why (:func:`~operators.status.claim_missing_status`)."""
    planner_spec(ps)
    namespace, _ = _ns_name(ps)
    claim = (settings or OperatorSettings()).workspace_claim
    if kube.get("v1", "PersistentVolumeClaim", namespace, claim) is None:
        previous = (ps.get("status") or {}).get("conditions") or []
        status = claim_missing_status(namespace, claim, now, previous)
        status["observedGeneration"] = ps["metadata"].get("generation")
        return status
    children = planner_children(ps, settings)
    isvc = children[0]
    for child in children:
        created = kube.apply(child)
        if child is isvc:
            isvc = created
    status = planner_status(isvc, now, (ps.get("status") or {}).get("conditions") or [])
    status["observedGeneration"] = ps["metadata"].get("generation")
    return {k: v for k, v in status.items() if v is not None}


def on_isvc_change(
    isvc: dict[str, Any], kube: Kube, now: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(owner, new owner status) after an InferenceService event; None when no PlannerService owns it."""
    owner = owner_name(isvc, PLANNER_SERVICE.kind)
    if owner is None:
        return None
    namespace, _ = _ns_name(isvc)
    ps = kube.get(API_VERSION, PLANNER_SERVICE.kind, namespace, owner)
    if ps is None:
        return None
    return ps, planner_status(isvc, now, (ps.get("status") or {}).get("conditions") or [])
