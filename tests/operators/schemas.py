"""Validation of manifests against the real schemas: the upstream CRDs in ``data/crds`` (copied byte for byte,
releases in its README) and the project's generated CRDs with ``jsonschema``, built-in kinds with
``kubernetes-validate``. Shared by the operator, chart and platform tests."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

DATA = Path(__file__).parent / "data"
UPSTREAM_CRDS = DATA / "crds"
REPO = Path(__file__).resolve().parents[2]
PROJECT_CRDS = REPO / "charts" / "proretrieval" / "crds"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the upstream CRDs are 4 MB
KUBE_VERSION = "1.33"
"""Kubernetes minor version built-in kinds are validated against."""


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, for every upstream and project CRD version."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*sorted(UPSTREAM_CRDS.glob("*.yaml")), *sorted(PROJECT_CRDS.glob("*.yaml"))]:
        crd = yaml.load(path.read_text(), Loader=_LOADER)  # resolves the ClickHouse file's anchors
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            out[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]
    return out


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schemas()[(api_version, kind)])


def is_custom(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in crd_schemas()


def validate(obj: dict[str, Any]) -> None:
    """Raise when ``obj`` breaks its schema: its CRD's for a custom kind, Kubernetes' for a built-in one."""
    key = (obj["apiVersion"], obj["kind"])
    if key in crd_schemas():
        errors = sorted(_validator(*key).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            where = ".".join(str(p) for p in e.path)
            raise AssertionError(f"{obj['kind']}/{obj['metadata'].get('name')}: {where}: {e.message}")
        return
    group = obj["apiVersion"].rpartition("/")[0]
    if "." in group and not group.endswith(".k8s.io"):
        raise AssertionError(f"no schema for custom kind {key}")
    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def errors_of(obj: dict[str, Any]) -> list[str]:
    """Every schema error of a custom-kind object, as ``path: message`` lines (for rejection tests)."""
    return [f"{'.'.join(str(p) for p in e.path)}: {e.message}"
            for e in _validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)]  # fmt: skip
