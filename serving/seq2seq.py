"""The encoder-decoder planner (MiniLM's encoder, a small GPT-2 decoder; trained by :mod:`rl.train.seq2seq`) at
inference: loading a saved one, and generating programs through transformers, free or under a grammar.

vLLM 0.32 runs no BERT-to-GPT-2 encoder-decoder, so this planner generates through transformers' ``generate``.
Evaluation (``seq2seq:PATH``, ``seq2seq-grounded:PATH``) and the planner's model server
(:mod:`serving.kserve_seq2seq`, an OpenAI-compatible chat route under KServe's ModelServer) both call
:meth:`Seq2SeqPlanner.generate`, so what is measured is what is served.

A grammar is applied as vLLM's ``guidance`` backend applies it: llguidance (one ``LLMatcher`` per output row,
its token mask laid over the logits at every step, a transformers ``LogitsProcessor``). It reads llguidance's
Lark dialect and GBNF, which is what ``prore serve`` sends for its ``grounded`` and ``grammar`` outputs.

The planner reads the request prefixed by its corpus (:func:`serving.prompt.request_text`): the chat of the
``request`` prompt profile, which is what a planner card naming an ``arch`` gets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ProReError

ARCH = "minilm-seq2seq"
"""The planner card's ``arch`` of this planner (a decoder-only planner's card names none)."""
ENCODER_TOKENIZER = "encoder_tokenizer"
"""The folder of a saved planner holding MiniLM's tokenizer (the decoder's is the folder's own)."""
MAX_REQUEST_TOKENS = 128
"""Longest request MiniLM reads, in WordPiece tokens (the medium benchmarks' longest is about 60)."""


class Seq2SeqError(ProReError):
    """The encoder-decoder planner cannot be loaded, or a grammar it is given cannot be compiled."""

    code = "seq2seq"


def compile_grammar(grammar: str) -> str:
    """``grammar`` (llguidance's Lark dialect or GBNF, as vLLM's ``guidance`` backend reads it) as an llguidance
    grammar definition; :class:`Seq2SeqError` when it is neither.

    >>> compile_grammar('start: "a" | "b"')  # Lark stays Lark
    'start: "a" | "b"'
    >>> compile_grammar('root ::= "a" | "b"').startswith("%llguidance")  # GBNF is converted
    True
    >>> compile_grammar("root ::= (")
    Traceback (most recent call last):
    serving.seq2seq.Seq2SeqError: the grammar is neither Lark nor GBNF: ...
    """
    import llguidance

    try:
        definition: str = llguidance.grammar_from("grammar", grammar)
    except ValueError as exc:
        raise Seq2SeqError(f"the grammar is neither Lark nor GBNF: {' '.join(str(exc).split())[:200]}",
                           code="planner_grammar") from None  # fmt: skip
    return definition


def grammar_matcher(lltok: Any, grammar: str) -> Any:
    """A fresh llguidance matcher of ``grammar`` over the tokenizer ``lltok`` (``llguidance.hf.from_tokenizer``);
    :class:`Seq2SeqError` when it does not compile."""
    import llguidance

    matcher = llguidance.LLMatcher(lltok, compile_grammar(grammar))
    if matcher.is_error():
        raise Seq2SeqError(f"the grammar does not compile: {matcher.get_error()}", code="planner_grammar")
    return matcher


class GrammarMask:
    """A transformers ``LogitsProcessor`` that allows, for each row of a batch, only the tokens its llguidance
    matcher accepts next (the row's grammar), and only end-of-sequence once the row's program is complete.

    ``grammars`` has one grammar per request; each request's ``copies`` rows (its samples) follow one another.
    A grammar is compiled once per request and its matcher copied for the other rows: a grounded grammar
    carries the corpus's values and takes about 30 ms to compile, a copy about 60 µs."""

    def __init__(self, lltok: Any, eos: int, grammars: Sequence[str], copies: int = 1) -> None:
        import llguidance.torch

        self.matchers = []
        for g in grammars:
            first = grammar_matcher(lltok, g)
            self.matchers += [first, *(first.deep_copy() for _ in range(copies - 1))]
        self.mask = llguidance.torch.allocate_token_bitmask(len(self.matchers), lltok.vocab_size)
        self.eos = eos
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


@dataclass(frozen=True)
class Generated:
    """One generated program: its text, the decoder's token ids it was sampled as (without the end token),
    and ``finished``: it ended before the budget. RL scores exactly these ids: decoding and tokenizing the text
    again need not give them back."""

    text: str
    ids: tuple[int, ...]
    finished: bool

    @property
    def tokens(self) -> int:
        """How many tokens the program used."""
        return len(self.ids)


class Seq2SeqPlanner:
    """A saved encoder-decoder planner, loaded once (eval mode); :meth:`generate` is serialized, since one
    process generates on all its cores."""

    def __init__(self, path: str | Path) -> None:
        from transformers import AutoTokenizer, EncoderDecoderModel

        p = Path(path)
        if not (p / ENCODER_TOKENIZER).is_dir():
            raise Seq2SeqError(f"{p} is not a {ARCH} planner (no {ENCODER_TOKENIZER}/)", code="planner_path")
        self.path = p
        from transformers.utils import logging as hf_logging

        # transformers builds MiniLM's BERT with a pooler the planner never had (the encoder was made without
        # one), reports its weights missing and initializes them at random; the pooler is unused, so it goes.
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        try:
            self.model: Any = EncoderDecoderModel.from_pretrained(str(p))
        finally:
            hf_logging.set_verbosity(verbosity)
        self.model.encoder.pooler = None
        self.model.eval()  # type: ignore[no-untyped-call]
        self.encoder_tokenizer = AutoTokenizer.from_pretrained(str(p / ENCODER_TOKENIZER))
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(p))
        self._lock = threading.Lock()
        self._lltok: Any = None

    @property
    def lltok(self) -> Any:
        """The decoder's tokenizer as llguidance reads it, made once (about 20 ms)."""
        if self._lltok is None:
            import llguidance.hf

            self._lltok = llguidance.hf.from_tokenizer(self.tokenizer)
        return self._lltok

    @property
    def max_tokens(self) -> int:
        """The most tokens a program may have: the decoder's learned positions, less its start token."""
        return int(self.model.decoder.config.n_positions) - 1

    def prompt_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the encoder reads of each text (truncated at :data:`MAX_REQUEST_TOKENS`)."""
        got = self.encoder_tokenizer(list(texts), truncation=True, max_length=MAX_REQUEST_TOKENS)
        return [len(ids) for ids in got["input_ids"]]

    def generate(self, texts: Sequence[str], *, grammars: Sequence[str] | None = None, max_tokens: int,
                 samples: int = 1, temperature: float = 0.0, seed: int | None = None) -> list[list[Generated]]:  # fmt: skip
        """``samples`` programs for each of ``texts`` (what the encoder reads: :func:`serving.prompt.request_text`),
        greedy at ``temperature`` 0, else sampled; under ``grammars`` (one per text, Lark or GBNF) when given.
        ``max_tokens`` is capped at :attr:`max_tokens`."""
        import torch
        from transformers import LogitsProcessorList

        if grammars is not None and len(grammars) != len(texts):
            raise ValueError(f"{len(grammars)} grammars for {len(texts)} texts")
        budget = max(1, min(max_tokens, self.max_tokens))
        tok = self.tokenizer
        got = self.encoder_tokenizer(list(texts), padding=True, truncation=True, max_length=MAX_REQUEST_TOKENS,
                                     return_tensors="pt")  # fmt: skip
        # Greedy decoding writes one program; several greedy "samples" are copies of it.
        drawn = samples if temperature > 0 else 1
        processors = LogitsProcessorList()
        if grammars is not None:
            processors.append(GrammarMask(self.lltok, tok.eos_token_id, grammars, copies=drawn))
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0}
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            ids = self.model.generate(**got, max_new_tokens=budget, num_beams=1, num_return_sequences=drawn,
                                      logits_processor=processors, decoder_start_token_id=tok.bos_token_id,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **sampling)  # fmt: skip
        rows: list[Generated] = []
        for row in ids:
            tokens = [int(t) for t in row[1:]]
            finished = tok.eos_token_id in tokens
            kept = tokens[: tokens.index(tok.eos_token_id)] if finished else tokens
            rows.append(Generated(str(tok.decode(kept, skip_special_tokens=True)), tuple(kept), finished))
        return [rows[i : i + drawn] * (samples // drawn) for i in range(0, len(rows), drawn)]
