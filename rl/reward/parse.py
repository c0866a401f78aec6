"""``S_f``: does a completion hold a program and nothing else?

The rule is :func:`serving.dsl.extract_program`'s (one parser for the reward, the planner client and
the CLI): an optional leading ``<think>…</think>`` block and an optional ```json fence are stripped,
and nothing else may surround the program. This module only turns its outcome into a value.

>>> parse_completion('<think>cheap</think>{"sql": "SELECT id FROM products", "retrieval_list": []}').ok
True
>>> parse_completion('Sure! {"sql": "SELECT id FROM products", "retrieval_list": []}').error.code
'surrounding_text'
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.dsl import DEFAULT_LIMITS, Code, DslLimits, FormatError, Program, extract_program


@dataclass(frozen=True)
class Parsed:
    """A completion's program, or the :class:`~serving.dsl.FormatError` that says why there is none."""

    program: Program | None
    error: FormatError | None

    @property
    def ok(self) -> bool:
        return self.program is not None


def parse_completion(completion: str, *, limits: DslLimits = DEFAULT_LIMITS) -> Parsed:
    """The program a model wrote, strictly (see the module docstring); never raises for bad text."""
    if not isinstance(completion, str):
        return Parsed(
            None, FormatError(f"a completion is text, not {type(completion).__name__}", code=Code.NOT_JSON)
        )
    try:
        return Parsed(extract_program(completion, limits=limits), None)
    except FormatError as exc:
        return Parsed(None, exc)
