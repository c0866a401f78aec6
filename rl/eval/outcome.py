"""Completions and programs run through the engine, each result classified by the layer that stopped it.

The reward (:mod:`rl.reward.scorer`), the planner methods (:mod:`rl.eval.planner_methods`) and the gold baselines
(:mod:`rl.baselines.gold`) all do the same thing: parse what a model wrote, run every program of a batch in
one ``Engine.execute_many`` call, and say for each item either what it ranked or why it ranked nothing. This
module is that path, once. A failure carries its layer as a field (:data:`Layer`, the reward's order of
DESIGN.md section 5), so a report counts layers without reading them back out of message text:

- ``format``: the completion holds no program (:class:`serving.dsl.FormatError`);
- ``validation``: the program is not valid for the corpus (:class:`serving.dsl.ValidationError`);
- ``execution``: a valid program failed to run (any other :class:`core.errors.ProReError`).

>>> failure_of(FormatError("no JSON object", code="not_json"))
Failure(layer='format', code='not_json', message='no JSON object')
>>> failure_of(FormatError("no JSON object", code="not_json")).line()
'format not_json: no JSON object'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from core.errors import ProReError
from serving.dsl import FormatError, Program, ValidationError, extract_program
from serving.engine import ExecutionResult

Layer = Literal["format", "validation", "execution"]
"""Where a program's path stopped, in the reward's layer order."""
FAILURE_LAYERS: tuple[Layer, ...] = get_args(Layer)


@dataclass(frozen=True)
class Failure:
    """Why an item ranked nothing: its layer, the error's code and its one-line message."""

    layer: Layer
    code: str
    message: str

    def line(self) -> str:
        """``<layer> <code>: <message>`` on one line, as reports and logs print it."""
        return " ".join(f"{self.layer} {self.code}: {self.message}".split())


def failure_of(exc: ProReError) -> Failure:
    """The failure an error of the parser, the validator or the engine stands for."""
    layer: Layer = (
        "format"
        if isinstance(exc, FormatError)
        else "validation"
        if isinstance(exc, ValidationError)
        else "execution"
    )
    return Failure(layer, exc.code, exc.message)


Ran = ExecutionResult | Failure
"""What one item came to: the engine's result, or the failure that stopped it."""


def run_programs(
    engine: Any, programs: Sequence[Program | Failure], k: int, *, raise_retryable: bool = False
) -> list[Ran]:
    """Run every program of ``programs`` in one ``execute_many`` call, each distinct program once.

    An item that is already a :class:`Failure` (it did not parse, say) stays one. Programs are deduplicated by
    their canonical JSON, so a batch of samples that agree costs one execution each. With ``raise_retryable``
    an error a retry could cure (a store went away) is raised instead of becoming a failure, for callers
    whose answer must not depend on it (the reward).
    """
    unique: dict[str, tuple[Program, list[int]]] = {}
    for i, p in enumerate(programs):
        if isinstance(p, Program):
            unique.setdefault(p.to_json(explicit=True), (p, []))[1].append(i)
    out: list[Ran | None] = [p if isinstance(p, Failure) else None for p in programs]
    if unique:
        got = engine.execute_many([p for p, _ in unique.values()], k=k)
        for (_, idxs), result in zip(unique.values(), got, strict=True):
            if isinstance(result, ProReError):
                if raise_retryable and result.retryable:
                    raise result
                result = failure_of(result)
            for i in idxs:
                out[i] = result
    return [r for r in out if r is not None]


def read_completion(text: str) -> Program | Failure:
    """The program a completion holds (the reward's strict rule, :func:`serving.dsl.extract_program`), or its
    ``format`` failure."""
    try:
        return extract_program(text)
    except FormatError as exc:
        return failure_of(exc)


def run_completions(engine: Any, completions: Sequence[str], k: int) -> list[Ran]:
    """Parse each completion and run the programs (:func:`run_programs`)."""
    return run_programs(engine, [read_completion(c) for c in completions], k)
