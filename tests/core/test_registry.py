"""The one registry: duplicates, unknown names, typed errors, providers imported on first lookup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.errors import ConfigError, ProReError
from core.registry import Registry
from indexing.embedders import EMBEDDERS


class Unknown(ProReError):
    code = "unknown_thing"


class Twice(ProReError):
    code = "twice"


def test_embedders_are_one_instance_of_it() -> None:
    assert isinstance(EMBEDDERS, Registry)
    assert EMBEDDERS.names() == ("hashing", "minilm", "minilm-onnx", "minilm-onnx-int8", "openai")


def test_error_types_and_codes_are_the_callers() -> None:
    reg: Registry[int] = Registry("thing", unknown=Unknown, duplicate=Twice, duplicate_code=None)
    reg.add("a", 1)
    with pytest.raises(Twice) as dup:
        reg.add("a", 2)
    assert dup.value.code == "twice" and reg.get("a") == 1
    with pytest.raises(Unknown) as unknown:
        reg.get("b")
    assert unknown.value.one_line() == "error unknown_thing: unknown thing 'b'; known things: a"
    with pytest.raises(ConfigError) as none:
        Registry[int]("gadget").get("x")
    assert none.value.message == "unknown gadget 'x'; known gadgets: none"
    with pytest.raises(TypeError):
        reg.add("", 3)


def test_providers_load_on_first_lookup_and_a_broken_one_is_not_an_unknown_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[str] = Registry("plugin", providers=("reg_provider_ok", "reg_provider_broken"))
    monkeypatch.setitem(sys.modules, "reg_registry_under_test", type(sys)("reg_registry_under_test"))
    sys.modules["reg_registry_under_test"].REG = reg  # type: ignore[attr-defined]
    (tmp_path / "reg_provider_ok.py").write_text(
        "import reg_registry_under_test as r\nr.REG.add('ok', 'fine')\n"
    )
    (tmp_path / "reg_provider_broken.py").write_text("raise ImportError('needs a missing extra')\n")
    for name in ("reg_provider_ok", "reg_provider_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match="missing extra"):
        reg.get("ok")
    with pytest.raises(ImportError, match="missing extra"):  # tried again, never "unknown plugin"
        reg.names()
    (tmp_path / "reg_provider_broken.py").write_text(
        "import reg_registry_under_test as r\nr.REG.add('late', 'fixed')\n"
    )
    monkeypatch.delitem(sys.modules, "reg_provider_broken", raising=False)
    assert reg.names() == ("late", "ok") and reg.get("late") == "fixed" and "ok" in reg
