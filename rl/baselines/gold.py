"""Reference methods that read the gold program: ``sql-only`` and ``oracle``.

* ``sql-only`` is the gold program with its vector predicates removed
  (:func:`serving.dsl.strip_retrievals`): what a text-to-SQL system that understood the request
  perfectly could do without semantic search. With no positive placeholder left, the ranking
  contract orders the result by id.
* ``oracle`` executes the gold program again. The benchmark keeps an instance only when its gold
  program ranks the gold id first, so the oracle must score Hit@1 = 1.0; anything else means the
  benchmark and the index or engine have drifted apart, and the run stops with
  :class:`~rl.eval.errors.OracleMismatch` listing the failing queries. It refuses the ``human`` split
  (hand-written requests), whose judgements are a WHERE plus facet labels and have no gold program; there
  ``sql-only`` runs the judgement's WHERE alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from core.errors import ProReError
from rl.eval.errors import EvalError, OracleMismatch
from rl.eval.methods import EvalInstance, MethodContext, Outcome, register_method
from rl.eval.outcome import Failure, failure_of, run_programs
from serving.dsl import Program, parse_program, strip_retrievals, validate

_SHOWN = 10  # failing qids named in the error; the rest are counted


def stripped_program(program: str, ctx: MethodContext) -> str:
    """The gold program without its vector predicates, as program JSON."""
    validated = validate(parse_program(program), ctx.schema)
    stripped = strip_retrievals(validated)
    if stripped.lstrip()[:1] == "{":
        return stripped
    return json.dumps({"sql": stripped, "retrieval_list": []})


@register_method(
    "sql-only",
    description="the gold program's SQL with its vector predicates removed (ranked by id)",
    uses_gold=True,
)
def sql_only(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    return _execute(ctx, instances, k, lambda inst: parse_program(stripped_program(inst.program, ctx)))


def _execute(
    ctx: MethodContext, instances: Sequence[EvalInstance], k: int, read: Callable[[EvalInstance], Program]
) -> list[Outcome]:
    """Each instance's program read by ``read`` (a parse or validation error is its outcome, in its layer), the
    rest run as one batch."""
    programs: list[Program | Failure] = []
    for inst in instances:
        try:
            programs.append(read(inst))
        except ProReError as exc:
            programs.append(failure_of(exc))
    return [Outcome.of(r) for r in run_programs(ctx.engine, programs, k)]


def oracle_failures(instances: Sequence[EvalInstance], outcomes: Sequence[Outcome]) -> list[str]:
    """Qids whose outcome does not put the gold id at rank 1, with the reason."""
    bad = []
    for inst, out in zip(instances, outcomes, strict=True):
        if out.ids is None:
            bad.append(f"{inst.qid} ({out.error})")
        elif not out.ids or out.ids[0] != inst.gold_id:
            top = out.ids[0] if out.ids else "nothing"
            bad.append(f"{inst.qid} (gold {inst.gold_id}, got {top})")
    return bad


@register_method(
    "oracle", description="the gold program executed again (must score Hit@1 = 1)", uses_gold=True
)
def oracle(ctx: MethodContext, instances: Sequence[EvalInstance], k: int) -> list[Outcome]:
    if any(getattr(inst, "split", None) == "human" for inst in instances):
        raise EvalError("the human split has no gold program (its judgements are a WHERE plus facet labels), "
                        "so the oracle does not apply; sql-only runs the judgement's WHERE", code="no_gold_program")  # fmt: skip
    outcomes = _execute(ctx, instances, k, lambda inst: parse_program(inst.program))
    bad = oracle_failures(instances, outcomes)
    if bad:
        more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        raise OracleMismatch(
            f"{len(bad)} of {len(instances)} gold programs did not rank their gold id first: "
            f"{'; '.join(bad[:_SHOWN])}{more}. Rebuild the benchmark for this index (prore bench synth)."
        )
    return outcomes
