"""The MiniLM encoder-decoder planner (:mod:`rl.train.seq2seq`) as evaluation methods, through transformers.

- ``seq2seq:PATH`` decodes greedily, free.
- ``seq2seq-grounded:PATH`` decodes under the grounded program grammar of ``planner-grounded:`` (search phrases
  copied from the request, literals from the corpus's column values; :func:`serving.dsl.structured.constraint_grammar`),
  applied by llguidance, the library vLLM's ``guidance`` backend runs for ``planner-grounded:``: one matcher
  per request, its token mask laid over the logits at every step (a transformers ``LogitsProcessor``).

vLLM cannot run this planner (:mod:`rl.train.seq2seq`), so generation is transformers' ``generate`` on CPU,
in batches of :data:`BATCH`. Programs are parsed and executed as every planner method's are
(:func:`rl.eval.planner_methods.execute`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rl.errors import TrainError
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome, register_family
from rl.eval.planner_methods import MAX_TOKENS, Completion, column_values, execute, method_name
from rl.train.seq2seq import MAX_REQUEST_TOKENS, encoder_text, load_seq2seq
from serving.dsl import longest_program_chars
from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar

BATCH = 32
"""Requests generated together."""


class GrammarMask:
    """A transformers ``LogitsProcessor`` that allows, for each row of a batch, only the tokens its llguidance
    matcher accepts next (the row's grammar), and only end-of-sequence once the row's program is complete."""

    def __init__(self, tokenizer: Any, grammars: Sequence[str]) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        lltok = llguidance.hf.from_tokenizer(tokenizer)
        self.matchers = [
            llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_lark(g)) for g in grammars
        ]
        for m in self.matchers:
            if m.is_error():
                raise TrainError(
                    f"the grounded grammar does not compile: {m.get_error()}", code="planner_grammar"
                )
        self.mask = llguidance.torch.allocate_token_bitmask(len(grammars), lltok.vocab_size)
        self.eos = tokenizer.eos_token_id
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import llguidance.torch

        for i, m in enumerate(self.matchers):
            if self.started and not m.is_stopped():
                m.consume_token(int(input_ids[i, -1]))
            if m.is_stopped() or m.is_error():
                self.mask[i].zero_()
                self.mask[i, self.eos // 32] = 1 << (self.eos % 32)  # finished: end of sequence only
            else:
                llguidance.torch.fill_next_token_bitmask(m, self.mask, i)
        self.started = True
        width = scores.shape[-1]
        llguidance.torch.apply_token_bitmask_inplace(
            scores, self.mask.to(scores.device)[:, : (width + 31) // 32]
        )
        return scores


def _loaded(ctx: MethodContext, path: str) -> tuple[Any, Any, Any]:
    key = f"seq2seq:{Path(path).resolve()}"
    if key not in ctx.cache:
        if not Path(path).is_dir():
            raise TrainError(f"no planner checkpoint at {path}", code="planner_path")
        ctx.cache[key] = load_seq2seq(path)
    got: tuple[Any, Any, Any] = ctx.cache[key]
    return got


def seq2seq_completions(ctx: MethodContext, path: str, requests: Sequence[str], *, grounded: bool = False) -> list[Completion]:  # fmt: skip
    """The planner's greedy completion for each of ``requests`` (under the grounded grammar with ``grounded``)."""
    import torch
    from transformers import LogitsProcessorList

    model, enc_tok, tok = _loaded(ctx, path)
    budget = longest_program_chars(ctx.schema, STRUCTURED_LIMITS) if grounded else MAX_TOKENS
    # The decoder's learned positions end there.
    budget = min(budget, int(model.decoder.config.n_positions) - 1)
    out: list[Completion] = []
    for at in range(0, len(requests), BATCH):
        batch = list(requests[at : at + BATCH])
        got = enc_tok([encoder_text(ctx.domain, nl) for nl in batch], padding=True, truncation=True,
                      max_length=MAX_REQUEST_TOKENS, return_tensors="pt")  # fmt: skip
        processors = LogitsProcessorList()
        if grounded:
            values = column_values(ctx)
            grammars = [constraint_grammar(ctx.schema, "grounded", STRUCTURED_LIMITS, request=nl, values=values,
                                           lark=True) for nl in batch]  # fmt: skip
            processors.append(GrammarMask(tok, grammars))
        with torch.no_grad():
            ids = model.generate(**got, max_new_tokens=budget, do_sample=False, num_beams=1,
                                 logits_processor=processors, decoder_start_token_id=tok.bos_token_id,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
        for row in ids:
            tokens = [int(t) for t in row[1:]]
            ended = tok.eos_token_id in tokens
            text = tok.decode(
                tokens[: tokens.index(tok.eos_token_id)] if ended else tokens, skip_special_tokens=True
            )
            out.append(Completion(text, None if ended else budget))
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
