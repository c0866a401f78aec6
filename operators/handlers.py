"""kopf handlers: thin wiring around :mod:`operators.reconcile`. Run with ``kopf run -m operators.handlers``.

- Errors say whether to retry: a :class:`~operators.errors.SpecError` (the resource is wrong) becomes
  ``kopf.PermanentError`` and is reported once as a Warning event; a retryable error becomes
  ``kopf.TemporaryError`` with its delay.
- Children carry owner references, so deleting a RetrievalTrainingJob deletes its RayJob (and its
  PlannerService), and deleting a PlannerService deletes its InferenceService, ScaledObject and
  ServiceMonitor. There are no finalizers: nothing outside the cluster's garbage collector must be
  cleaned up, so no deletion handler is registered and kopf adds none.
- kopf's own bookkeeping lives in annotations (``proretrieval.io/...``), not in ``status``, which the CRDs
  type strictly.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import kopf

from operators.api import GROUP, PLANNER_SERVICE, TRAINING_JOB, VERSION
from operators.errors import OperatorError, SpecError
from operators.kube import ApiKube, Kube
from operators.objects import MANAGED_BY
from operators.reconcile import (
    check_update,
    on_isvc_change,
    on_rayjob_change,
    read_step,
    reconcile_planner,
    reconcile_training,
)
from operators.settings import OperatorSettings
from operators.status import phase_event

F = TypeVar("F", bound=Callable[..., Any])
SETTINGS = OperatorSettings.from_env()
_CHILD = {"app.kubernetes.io/managed-by": MANAGED_BY}


@functools.cache
def kube() -> Kube:
    return ApiKube()


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def translate(fn: F) -> F:
    """Turn the operator's errors into kopf's: permanent for a bad resource, temporary with a delay."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as exc:
            body = kwargs.get("body")
            if body is not None:
                kopf.event(body, type="Warning", reason="InvalidSpec", message=exc.one_line())
            raise kopf.PermanentError(exc.one_line()) from exc
        except OperatorError as exc:
            if exc.retryable:
                raise kopf.TemporaryError(exc.one_line(), delay=exc.delay_s) from exc
            raise kopf.PermanentError(exc.one_line()) from exc

    return wrapper  # type: ignore[return-value]


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = 20  # INFO: phase changes and refusals become events


def _apply(body: Any, patch: Any, status: dict[str, Any]) -> None:
    event = phase_event((body.get("status") or {}).get("phase"), str(status.get("phase")))
    if event:
        kopf.event(body, type=event[0], reason=event[1], message=event[2])
    patch.status.update(status)


@kopf.on.create(GROUP, VERSION, TRAINING_JOB.plural)
@kopf.on.resume(GROUP, VERSION, TRAINING_JOB.plural)
@translate
def training_created(body: Any, patch: Any, **_: Any) -> None:
    _apply(body, patch, reconcile_training(dict(body), kube(), now(), SETTINGS))


@kopf.on.update(GROUP, VERSION, TRAINING_JOB.plural, field="spec")
@translate
def training_updated(old: Any, new: Any, body: Any, patch: Any, **_: Any) -> None:
    check_update(old, new)
    _apply(body, patch, reconcile_training(dict(body), kube(), now(), SETTINGS))


@kopf.on.event("ray.io", "v1", "rayjobs", labels=_CHILD)
@translate
def rayjob_changed(body: Any, **_: Any) -> None:
    found = on_rayjob_change(dict(body), kube(), now(), SETTINGS)
    if found is None:
        return
    job, status = found
    event = phase_event((job.get("status") or {}).get("phase"), str(status.get("phase")))
    if event:
        kopf.event(cast(kopf.Body, job), type=event[0], reason=event[1], message=event[2])
    namespace = job["metadata"].get("namespace") or "default"
    kube().patch_status(job["apiVersion"], TRAINING_JOB.kind, namespace, job["metadata"]["name"], status)


@kopf.timer(GROUP, VERSION, TRAINING_JOB.plural, interval=SETTINGS.status_interval_s, idle=SETTINGS.status_interval_s,
            when=lambda status, **_: (status or {}).get("phase") == "Running")  # fmt: skip
@translate
def training_step(body: Any, patch: Any, **_: Any) -> None:
    step = read_step(dict(body), kube())
    if step is not None and step != (body.get("status") or {}).get("step"):
        patch.status["step"] = step


@kopf.on.create(GROUP, VERSION, PLANNER_SERVICE.plural)
@kopf.on.resume(GROUP, VERSION, PLANNER_SERVICE.plural)
@kopf.on.update(GROUP, VERSION, PLANNER_SERVICE.plural, field="spec")
@translate
def planner_reconciled(body: Any, patch: Any, **_: Any) -> None:
    patch.status.update(reconcile_planner(dict(body), kube(), now(), SETTINGS))


@kopf.on.event("serving.kserve.io", "v1beta1", "inferenceservices", labels=_CHILD)
@translate
def isvc_changed(body: Any, **_: Any) -> None:
    found = on_isvc_change(dict(body), kube(), now())
    if found is None:
        return
    ps, status = found
    namespace = ps["metadata"].get("namespace") or "default"
    kube().patch_status(ps["apiVersion"], PLANNER_SERVICE.kind, namespace, ps["metadata"]["name"], status)
