"""What the operator would create for a resource, without a cluster (``prore k8s render``).

For a RetrievalTrainingJob: its RayJob, and with ``promote`` the PlannerService it creates on success
and that service's children. For a PlannerService: its InferenceService, ScaledObject and ServiceMonitor.
Objects not applied yet have no ``uid``; their owner references show an empty one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from operators.api import API_VERSION, PLANNER_SERVICE, TRAINING_JOB
from operators.errors import SpecError
from operators.promotion import planner_children, planner_service
from operators.settings import OperatorSettings
from operators.training import rayjob


def children(resource: dict[str, Any], settings: OperatorSettings | None = None) -> list[dict[str, Any]]:
    """Every object the operator creates for ``resource``, in creation order."""
    if not isinstance(resource, dict) or resource.get("apiVersion") != API_VERSION:
        got = resource.get("apiVersion") if isinstance(resource, dict) else type(resource).__name__
        raise SpecError(f"expected apiVersion {API_VERSION}, got {got!r}", path="apiVersion")
    if not (resource.get("metadata") or {}).get("name"):
        raise SpecError("is required", path="metadata.name")
    kind = resource.get("kind")
    if kind == TRAINING_JOB.kind:
        out = [rayjob(resource, settings)]
        ps = planner_service(resource, settings)
        if ps is not None:
            out += [ps, *planner_children(ps, settings)]
        return out
    if kind == PLANNER_SERVICE.kind:
        return planner_children(resource, settings)
    raise SpecError(f"expected {TRAINING_JOB.kind} or {PLANNER_SERVICE.kind}, got {kind!r}", path="kind")


def render_documents(text: str, settings: OperatorSettings | None = None) -> list[dict[str, Any]]:
    """The children of every resource in a multi-document YAML text."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise SpecError(f"not YAML: {' '.join(str(exc).split())}") from None
    out: list[dict[str, Any]] = []
    for doc in docs:
        out += children(doc, settings)
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a runtime env, a script) as literal blocks, so they read as written."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML stream."""
    return yaml.dump_all(list(objects), Dumper=_Dumper, sort_keys=False, width=110)
