"""Skip marks for test modules whose packages are not installed, found without importing them.

Every pytest-xdist worker imports every test module to collect it, so a module-level ``pytest.importorskip``
of a heavy package (sentence-transformers, vLLM) imported it in every worker, whether or not that worker ran
one of the module's tests: 6-7 s of CPU a worker each (``python -c "import sentence_transformers"``). A module
marked with :func:`needs` imports them in its tests instead.
"""

from __future__ import annotations

import importlib.util

import pytest


def needs(*modules: str, reason: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark, true where any of ``modules`` cannot be found (``importlib.util.find_spec``).

    >>> needs("json", reason="stdlib").args, needs("no_such_module_x", reason="the x extra").kwargs["reason"]
    ((False,), 'the x extra (no_such_module_x is not installed)')
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{reason} ({', '.join(missing)} is not installed)")
