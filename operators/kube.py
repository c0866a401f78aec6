"""The operator's one client interface to the cluster, and its real implementation.

:class:`Kube` is all the reconcile steps (:mod:`operators.reconcile`) need: read, create and patch the
status of objects, and read a Ray job's log. :class:`ApiKube` implements it with the ``kubernetes``
client and the Ray dashboard's HTTP API; :class:`operators.kube_fake.FakeKube`, beside this file,
imitates it in memory for tests, because no API server can run where the tests run.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol

from operators.errors import ApiUnavailable

PLURALS: dict[str, str] = {
    "RayJob": "rayjobs",
    "InferenceService": "inferenceservices",
    "ScaledObject": "scaledobjects",
    "ServiceMonitor": "servicemonitors",
    "RetrievalTrainingJob": "retrievaltrainingjobs",
    "PlannerService": "plannerservices",
}
"""Resource plural of every custom resource kind the operator touches."""
CORE_READERS: dict[str, str] = {"PersistentVolumeClaim": "read_namespaced_persistent_volume_claim"}
"""The core (``v1``) kinds the operator reads, and the ``CoreV1Api`` method that reads each (it writes none)."""


class Kube(Protocol):
    """What the operator asks of the cluster."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (its metadata names namespace and name); an existing one is returned as it is."""

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``, or merge its ``spec`` into the existing one; the object as stored."""

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        """Merge ``status`` into the object's status subresource."""

    def job_log(self, dashboard_url: str, job_id: str) -> str:
        """The log of Ray job ``job_id`` from the dashboard at ``dashboard_url``."""


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class ApiKube:
    """:class:`Kube` over the Kubernetes API (in-cluster or kubeconfig credentials) and the Ray dashboard."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        from kubernetes import client, config  # the k8s extra

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        self._api = client.CustomObjectsApi()
        self._core = client.CoreV1Api()
        self._exc = client.exceptions.ApiException
        self._timeout_s = timeout_s

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._exc as exc:
            if exc.status == 404:
                return None
            if exc.status in (409,):
                raise
            if exc.status >= 500 or exc.status == 429:
                raise ApiUnavailable(f"Kubernetes API answered {exc.status}: {exc.reason}") from exc
            raise

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if api_version == "v1":
            found = self._call(getattr(self._core, CORE_READERS[kind]), name, namespace)
            core: dict[str, Any] | None = (
                None if found is None else self._core.api_client.sanitize_for_serialization(found)
            )
            return core
        group, version = split_api_version(api_version)
        out: dict[str, Any] | None = self._call(
            self._api.get_namespaced_custom_object, group, version, namespace, PLURALS[kind], name
        )
        return out

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version = split_api_version(obj["apiVersion"])
        meta = obj["metadata"]
        try:
            out: dict[str, Any] = self._call(
                self._api.create_namespaced_custom_object,
                group,
                version,
                meta["namespace"],
                PLURALS[obj["kind"]],
                obj,
            )
            return out
        except self._exc as exc:
            if exc.status != 409:
                raise
            found = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
            return found or obj

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        found = self.create(obj)
        if found.get("spec") == obj.get("spec"):
            return found
        group, version = split_api_version(obj["apiVersion"])
        meta = obj["metadata"]
        out: dict[str, Any] = self._call(self._api.patch_namespaced_custom_object, group, version, meta["namespace"],
                                         PLURALS[obj["kind"]], meta["name"], {"spec": obj["spec"]})  # fmt: skip
        return out

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        group, version = split_api_version(api_version)
        self._call(self._api.patch_namespaced_custom_object_status, group, version, namespace, PLURALS[kind], name,
                   {"status": status})  # fmt: skip

    def job_log(self, dashboard_url: str, job_id: str) -> str:
        url = f"{dashboard_url.rstrip('/')}/api/jobs/{job_id}/logs"
        try:
            with urllib.request.urlopen(url, timeout=self._timeout_s) as resp:
                body = json.loads(resp.read().decode())
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise ApiUnavailable(f"Ray dashboard {dashboard_url} did not answer: {exc}") from exc
        return str(body.get("logs", ""))
