"""Small helpers shared by the reconcile functions: names, labels, owner references, storage URIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.api import API_VERSION, GROUP
from operators.errors import SpecError

MANAGED_BY = "proretrieval-operator"


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference that makes deleting ``owner`` delete the child (foreground or background)."""
    meta = owner.get("metadata", {})
    return {"apiVersion": owner.get("apiVersion", API_VERSION), "kind": owner["kind"], "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def child_metadata(owner: dict[str, Any], name: str, *, component: str, **labels: str) -> dict[str, Any]:
    """Name, namespace, labels and owner reference of a child of ``owner``."""
    meta = owner.get("metadata", {})
    owner_label = f"{GROUP}/{owner['kind'].lower()}"
    out: dict[str, Any] = {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": "proretrieval",
                   "app.kubernetes.io/component": component, owner_label: meta["name"], **labels},
        "ownerReferences": [owner_reference(owner)],
    }  # fmt: skip
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    return out


@dataclass(frozen=True)
class StorageUri:
    """``hf://ORG/NAME``, ``pvc://CLAIM/PATH`` or ``s3://BUCKET/PATH``, split."""

    scheme: str
    root: str
    """Hugging Face org, claim name or bucket."""
    path: str
    """The rest, without leading slash; may be empty."""

    @classmethod
    def parse(cls, uri: str, *, field: str = "") -> StorageUri:
        scheme, sep, rest = uri.partition("://")
        if not sep or scheme not in ("hf", "pvc", "s3") or not rest.split("/", 1)[0]:
            raise SpecError(f"'{uri}' is not hf://..., pvc://CLAIM/PATH or s3://BUCKET/PATH", path=field)
        root, _, path = rest.partition("/")
        return cls(scheme, root, path.strip("/"))

    def under(self, mount: str) -> str:
        """Where this location appears when its volume is mounted at ``mount``."""
        return f"{mount}/{self.path}" if self.path else mount

    def join(self, *parts: str) -> str:
        """The URI of a path below this one."""
        tail = "/".join(p.strip("/") for p in (self.path, *parts) if p.strip("/"))
        return f"{self.scheme}://{self.root}/{tail}" if tail else f"{self.scheme}://{self.root}"

    def __str__(self) -> str:
        return self.join()
