"""The operator's settings from the environment its Deployment sets (``PRORE_OPERATOR_<FIELD>``)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from operators.api import PlannerServiceSpec
from operators.errors import SpecError
from operators.promotion import transformer_args
from operators.settings import ENV_PREFIX, OperatorSettings


def test_from_env_reads_the_workspace_claim_and_the_stores() -> None:
    s = OperatorSettings.from_env({"PRORE_OPERATOR_WORKSPACE_CLAIM": "shared-workspace",
                                   "PRORE_OPERATOR_CLICKHOUSE_URL": "http://ch.stores.svc:8123",
                                   "PRORE_OPERATOR_MILVUS_URI": "http://milvus.stores.svc:19530"})  # fmt: skip
    assert s.workspace_claim == "shared-workspace"
    assert s.clickhouse_url == "http://ch.stores.svc:8123"
    assert s.milvus_uri == "http://milvus.stores.svc:19530"
    assert s.transformer_image == OperatorSettings().transformer_image  # the others keep their defaults


def test_from_env_without_variables_is_the_defaults() -> None:
    s = OperatorSettings.from_env({"UNRELATED": "x"})
    assert s == OperatorSettings()
    assert s.clickhouse_url == s.milvus_uri == ""
    assert s.workspace_claim == "proretrieval-workspace"


def test_empty_store_variables_leave_the_transformer_on_the_embedded_stores() -> None:
    """The chart always sets the variables; an empty one (the chart's default) gives no argument."""
    spec = PlannerServiceSpec(model="pvc://checkpoints/final")
    empty = OperatorSettings.from_env({"PRORE_OPERATOR_CLICKHOUSE_URL": "", "PRORE_OPERATOR_MILVUS_URI": ""})
    assert transformer_args(spec, empty) == transformer_args(spec, OperatorSettings())
    assert not [a for a in transformer_args(spec, empty) if a.startswith(("--clickhouse", "--milvus"))]
    given = OperatorSettings.from_env({"PRORE_OPERATOR_CLICKHOUSE_URL": "http://ch:8123"})
    assert transformer_args(spec, given)[-1] == "--clickhouse_url=http://ch:8123"


def test_every_setting_has_a_variable_and_a_docstring() -> None:
    import ast
    import inspect

    import operators.settings as module

    tree = ast.parse(inspect.getsource(module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OperatorSettings")
    documented = {stmt.target.id for stmt, nxt in zip(cls.body, cls.body[1:], strict=False)
                  if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                  and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)}  # fmt: skip
    for f in fields(OperatorSettings):
        assert f.name in documented, f"{f.name} has no docstring"
        read = getattr(OperatorSettings.from_env({ENV_PREFIX + f.name.upper(): "7"}), f.name)
        assert read in ("7", ("7",), 7.0) and read != getattr(OperatorSettings(), f.name), f.name


def test_a_bad_number_is_one_typed_error() -> None:
    with pytest.raises(SpecError, match="PRORE_OPERATOR_STATUS_INTERVAL_S"):
        OperatorSettings.from_env({"PRORE_OPERATOR_STATUS_INTERVAL_S": "soon"})
