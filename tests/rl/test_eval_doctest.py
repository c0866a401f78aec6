"""The examples in the docstrings of rl.eval and rl.baselines run and hold."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import rl.baselines
import rl.eval

MODULES = [
    "rl.eval",
    *(f"{pkg.__name__}.{m.name}" for pkg in (rl.eval, rl.baselines) for m in pkgutil.iter_modules(pkg.__path__)),
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
