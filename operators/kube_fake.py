"""An in-memory :class:`~operators.kube.Kube` for tests: the one fake of the API server, kept beside the
interface it imitates. It stores objects by (kind, namespace, name), gives each a ``uid``, and keeps
what real clients rely on: ``create`` of an existing name returns the existing object, and
``patch_status`` merges into ``status`` only.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any


class FakeKube:
    """Objects in a dict; Ray job logs set by the test."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.created: list[tuple[str, str]] = []
        """(kind, name) of every create that made a new object, in order."""
        self._uids = itertools.count(1)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as a user's ``kubectl apply`` would (gives it a uid)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("generation", 1)
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        found = self.get(obj["apiVersion"], obj["kind"], meta.get("namespace", "default"), meta["name"])
        if found is not None:
            return found
        self.created.append((obj["kind"], meta["name"]))
        return self.put(obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        found = self.create(obj)
        if found.get("spec") != obj.get("spec"):
            meta = obj["metadata"]
            stored = self.objects[(obj["kind"], meta.get("namespace", "default"), meta["name"])]
            stored["spec"] = copy.deepcopy(obj["spec"])
            stored["metadata"]["generation"] = stored["metadata"].get("generation", 1) + 1
            found = copy.deepcopy(stored)
        return found

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        obj = self.objects[(kind, namespace, name)]
        merged = obj.setdefault("status", {})
        for key, value in status.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = copy.deepcopy(value)

    def job_log(self, dashboard_url: str, job_id: str) -> str:
        return self.logs.get(job_id, "")
