"""The examples in the docstrings of every ``rl`` module run and hold."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import rl

NEEDS_VERL = {"rl.verl.cpu"}
"""Modules that import verl, which has an environment of its own (``make test-verl``)."""
MODULES = sorted(m.name for m in pkgutil.walk_packages(rl.__path__, "rl.") if m.name not in NEEDS_VERL)


def test_every_package_is_walked() -> None:
    assert {"rl.eval.metrics", "rl.train.config", "rl.train.prompt_filter", "rl.reward.terms", "rl.bench.tree"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
