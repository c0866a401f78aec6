"""The chart as a whole: lint, schema, both values files rendered and every object validated, the CRDs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from operators import crdgen
from operators.api import KINDS
from tests.charts.chart import CHART, helm, production_values, render
from tests.operators.schemas import validate

TEMPLATES = sorted(p.name for p in (CHART / "templates").glob("*.yaml"))


def test_helm_lint_is_clean() -> None:
    for values in ({}, production_values()):
        result = helm.lint(str(CHART), values, strict=True)
        assert result["errors"] == [] and result["messages"] == [], result


@pytest.mark.parametrize("values", [{}, "production"], ids=["defaults", "production"])
def test_every_rendered_object_matches_its_schema(values: Any) -> None:
    rendered = render(production_values() if values == "production" else {})
    objects = [o for docs in rendered.values() for o in docs]
    assert len(objects) >= 14
    for obj in objects:
        validate(obj)


def test_production_renders_what_defaults_leave_out() -> None:
    default = {t for t, docs in render().items() if docs}
    prod = {t for t, docs in render(production_values()).items() if docs}
    assert {"api-ingress.yaml", "indexing-job.yaml", "operator-servicemonitor.yaml"} <= prod - default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"reward": {"replicas": "three"}}, "at '/reward/replicas': got string, want integer"),
        ({"api": {"ingres": {"enabled": True}}}, "additional properties 'ingres' not allowed"),
        ({"embedder": "bert"}, "at '/embedder': value must be one of"),
        ({"stores": {"clickhouseUrl": "clickhouse:8123"}}, "at '/stores/clickhouseUrl'"),
        ({"indexing": {"domain": "movies"}}, "at '/indexing/domain'"),
        ({"reward": {"autoscaling": {"maxReplicas": 0}}}, "at '/reward/autoscaling/maxReplicas'"),
        ({"api": {"fuse": "self-query", "fuseGate": "familiar"}}, "at '/api/plannerCard': minLength"),
        ({"api": {"plannerCard": "/workspace/m", "plannerProfile": "short"}}, "at '/api/plannerProfile'"),
        ({"api": {"plannerCard": "runs/m"}}, "at '/api/plannerCard'"),
    ],
)
def test_bad_values_are_rejected_by_the_schema(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        render(values)


def test_every_values_key_is_documented() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    opaque_indent: int | None = None
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(-\s+)?([A-Za-z][\w.-]*):", line)
        if not m or m.group(2):
            continue
        indent = len(m.group(1))
        if opaque_indent is not None and indent > opaque_indent:
            continue  # inside a value documented as a whole (resources, securityContext, ...)
        opaque_indent = None
        assert lines[i - 1].strip().startswith("# --"), (
            f"values.yaml:{i + 1}: '{m.group(3)}' has no '# --' comment"
        )
        nxt = next((ln for ln in lines[i + 1 :] if ln.strip()), "")
        if not line.split(":", 1)[1].strip() and not nxt.strip().startswith("# --"):
            opaque_indent = indent


def test_the_schema_describes_every_default() -> None:
    import json

    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART / "values.yaml").read_text()))


def test_the_chart_ships_the_generated_crds() -> None:
    shipped = {c["name"]: c["data"] for c in helm.Chart.load(str(CHART)).crds}
    assert shipped == {f"crds/{crdgen.filename(k)}": crdgen.render(k) for k in KINDS}
    for kind in KINDS:
        validate(yaml.safe_load((CHART / "crds" / crdgen.filename(kind)).read_text()))


def test_every_template_has_a_unit_test() -> None:
    from tests.charts import test_templates

    tests = {n for n in dir(test_templates) if n.startswith("test_")}
    for template in TEMPLATES:
        prefix = "test_" + template.removesuffix(".yaml").replace("-", "_")
        assert any(n == prefix or n.startswith(prefix + "__") for n in tests), f"{template} has no {prefix}"
