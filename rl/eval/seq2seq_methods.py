"""The MiniLM encoder-decoder planner (:mod:`rl.train.seq2seq`) as evaluation methods, through transformers.

- ``seq2seq:PATH`` decodes greedily, free.
- ``seq2seq-grounded:PATH`` decodes under the grounded program grammar of ``planner-grounded:`` (search phrases
  copied from the request, literals from the corpus's column values; :func:`serving.dsl.structured.constraint_grammar`),
  applied by llguidance, the library vLLM's ``guidance`` backend runs for ``planner-grounded:``.

Both take ``planner:``'s decoding options (:class:`rl.eval.guided.Decoding`): ``PATH?samples=8``
decodes a request whose program ranks nothing again as 8 samples and keeps the ranking most agree on, and
``&fallback=self-query`` answers what stays empty (a system, named apart: ``seq2seq-grounded:RUN-eg8-fb-self-query``).

Generation is :meth:`serving.seq2seq.Seq2SeqPlanner.generate`, the planner's model server's own
(:mod:`serving.kserve_seq2seq`), in batches of :data:`BATCH`. Programs are parsed and executed as every planner
method's are (:func:`rl.eval.guided.execute`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rl.errors import TrainError
from rl.eval.guided import Completion, decoding_words, guided_run, parse_decoding
from rl.eval.methods import MethodContext, MethodSpec, register_family
from rl.eval.planner_methods import MAX_TOKENS, column_values, method_name
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


def seq2seq_samples(ctx: MethodContext, path: str, requests: Sequence[str], *, grounded: bool = False,
                    n: int = 1, temperature: float = 0.0) -> list[list[Completion]]:  # fmt: skip
    """``n`` completions for each of ``requests``: greedy at ``temperature`` 0, else sampled (seeded per batch, so a
    rerun of the same batches draws the same samples); under the grounded grammar with ``grounded``."""
    planner = _loaded(ctx, path)
    budget = longest_program_chars(ctx.schema, STRUCTURED_LIMITS) if grounded else MAX_TOKENS
    out: list[list[Completion]] = []
    per_call = max(1, BATCH // n)
    for at in range(0, len(requests), per_call):
        batch = list(requests[at : at + per_call])
        grammars = None
        if grounded:
            values = column_values(ctx)
            grammars = [constraint_grammar(ctx.schema, "grounded", STRUCTURED_LIMITS, request=nl, values=values,
                                           lark=True) for nl in batch]  # fmt: skip
        got = planner.generate([request_text(ctx.domain, nl) for nl in batch], grammars=grammars, max_tokens=budget,
                               samples=n, temperature=temperature, seed=at if temperature > 0 else None)  # fmt: skip
        out += [[Completion(g.text, None if g.finished else g.tokens) for g in group] for group in got]
    return out


def seq2seq_completions(ctx: MethodContext, path: str, requests: Sequence[str], *, grounded: bool = False) -> list[Completion]:  # fmt: skip
    """The planner's greedy completion for each of ``requests`` (under the grounded grammar with ``grounded``)."""
    return [group[0] for group in seq2seq_samples(ctx, path, requests, grounded=grounded)]


def seq2seq_spec(arg: str, *, grounded: bool = False) -> MethodSpec:
    """The spec of a MiniLM encoder-decoder planner saved at ``arg``'s path, with ``planner:``'s decoding
    options (``?samples=8``, ``&temperature=``, ``&fallback=``: :class:`rl.eval.guided.Decoding`)."""
    path, decoding = parse_decoding(arg, constraint="grounded" if grounded else "none")
    family = "seq2seq-grounded" if grounded else "seq2seq"
    how = "the grounded program grammar, by llguidance" if grounded else "free decoding"
    run = guided_run(lambda ctx, requests: seq2seq_completions(ctx, path, requests, grounded=grounded),
                     lambda ctx, requests, n, t: seq2seq_samples(ctx, path, requests, grounded=grounded, n=n,
                                                                 temperature=t),
                     decoding, path)  # fmt: skip
    return MethodSpec(method_name(family, path) + decoding.suffix, run,
                      f"MiniLM encoder-decoder planner at {path} through transformers ({how}{decoding_words(decoding)})")  # fmt: skip


register_family("seq2seq", seq2seq_spec)
register_family("seq2seq-grounded", lambda path: seq2seq_spec(path, grounded=True))
