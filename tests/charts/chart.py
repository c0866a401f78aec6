"""Render charts with Helm's own renderer (helm-python-sdk, Helm's Go SDK; no helm binary) in tests."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="the k8s extra (helm-python-sdk) is not installed")

from tests.operators.schemas import REPO  # noqa: E402

CHART = REPO / "charts" / "proretrieval"
PRODUCTION = CHART / "values-production.yaml"
RELEASE = "pr"
NAMESPACE = "proretrieval"


@functools.cache
def _chart() -> Any:
    return helm.Chart.load(str(CHART))


def render(values: dict[str, Any] | None = None, *, chart: Path = CHART) -> dict[str, list[dict[str, Any]]]:
    """Template file name -> the objects it renders, for ``values`` over the chart's defaults."""
    c = _chart() if chart == CHART else helm.Chart.load(str(chart))
    out = c.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return {Path(k).name: [d for d in yaml.safe_load_all(v) if d] for k, v in out.items()}


def production_values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(PRODUCTION.read_text())
    return data


def one(rendered: dict[str, list[dict[str, Any]]], template: str, kind: str | None = None) -> dict[str, Any]:
    docs = [d for d in rendered[template] if kind is None or d["kind"] == kind]
    assert len(docs) == 1, f"{template}: {[d['kind'] for d in rendered[template]]}"
    return docs[0]


def container(obj: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return c
