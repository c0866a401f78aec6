"""The examples in the docstrings of serving.dsl run and hold."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import serving.dsl

MODULES = ["serving.dsl", *(f"serving.dsl.{m.name}" for m in pkgutil.iter_modules(serving.dsl.__path__))]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
