"""The MiniLM encoder-decoder planner (:mod:`rl.train.seq2seq`) as evaluation methods, through transformers.

- ``seq2seq:PATH`` decodes greedily, free.
- ``seq2seq-grounded:PATH`` decodes under the grounded program grammar of ``planner-grounded:`` (search phrases
  copied from the request, literals from the corpus's column values; :func:`serving.dsl.structured.constraint_grammar`),
  applied by llguidance, the library vLLM's ``guidance`` backend runs for ``planner-grounded:``.

Generation is :meth:`serving.seq2seq.Seq2SeqPlanner.generate`, the planner's model server's own
(:mod:`serving.kserve_seq2seq`), in batches of :data:`BATCH`. Programs are parsed and executed as every planner
method's are (:func:`rl.eval.planner_methods.execute`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rl.errors import TrainError
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome, register_family
from rl.eval.planner_methods import MAX_TOKENS, Completion, column_values, execute, method_name
from serving.dsl import longest_program_chars
from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
from serving.prompt import request_text
from serving.seq2seq import Seq2SeqPlanner

BATCH = 32
"""Requests generated together."""


def _loaded(ctx: MethodContext, path: str) -> Seq2SeqPlanner:
    key = f"seq2seq:{Path(path).resolve()}"
    if key not in ctx.cache:
        if not Path(path).is_dir():
            raise TrainError(f"no planner checkpoint at {path}", code="planner_path")
        ctx.cache[key] = Seq2SeqPlanner(path)
    got: Seq2SeqPlanner = ctx.cache[key]
    return got


def seq2seq_completions(ctx: MethodContext, path: str, requests: Sequence[str], *, grounded: bool = False) -> list[Completion]:  # fmt: skip
    """The planner's greedy completion for each of ``requests`` (under the grounded grammar with ``grounded``)."""
    planner = _loaded(ctx, path)
    budget = longest_program_chars(ctx.schema, STRUCTURED_LIMITS) if grounded else MAX_TOKENS
    out: list[Completion] = []
    for at in range(0, len(requests), BATCH):
        batch = list(requests[at : at + BATCH])
        grammars = None
        if grounded:
            values = column_values(ctx)
            grammars = [constraint_grammar(ctx.schema, "grounded", STRUCTURED_LIMITS, request=nl, values=values,
                                           lark=True) for nl in batch]  # fmt: skip
        got = planner.generate(
            [request_text(ctx.domain, nl) for nl in batch], grammars=grammars, max_tokens=budget
        )
        out += [Completion(g.text, None if g.finished else g.tokens) for [g] in got]
    return out


def seq2seq_run(path: str, *, grounded: bool) -> Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]:  # fmt: skip
    def run(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        return execute(ctx, seq2seq_completions(ctx, path, [i.nl for i in batch], grounded=grounded), k)

    return run


def seq2seq_spec(path: str, *, grounded: bool = False) -> MethodSpec:
    """The spec of a MiniLM encoder-decoder planner saved at ``path``."""
    family = "seq2seq-grounded" if grounded else "seq2seq"
    how = "the grounded program grammar, by llguidance" if grounded else "free decoding"
    return MethodSpec(method_name(family, path), seq2seq_run(path, grounded=grounded),
                      f"MiniLM encoder-decoder planner at {path} through transformers ({how})")  # fmt: skip


register_family("seq2seq", seq2seq_spec)
register_family("seq2seq-grounded", lambda path: seq2seq_spec(path, grounded=True))
