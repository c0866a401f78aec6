"""How a planner's completions become a method's answer: parsing and execution, execution-guided samples,
fusion with a baseline (and its gates), and a fallback for what stays empty.

:func:`guided_run` is the method function of every trained planner, ``planner:`` through vLLM
(:mod:`rl.eval.planner_methods`) and ``seq2seq:`` through transformers (:mod:`rl.eval.seq2seq_methods`) alike:
each hands it its greedy and sampling calls and the :class:`Decoding` parsed from the method's options
(``PATH?samples=8&fuse=self-query&gate=familiar&fallback=rrf``, :func:`parse_decoding`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from rl.errors import TrainError
from rl.eval.methods import EvalInstance, MethodContext, Outcome, get_method
from rl.eval.outcome import Failure, read_completion, run_programs
from serving.dsl import Program
from serving.engine.results import consensus, fuse, unanimous
from serving.familiarity import open_familiarity

CONSTRAINTS: dict[str, tuple[str, str]] = {
    "none": ("planner", "free decoding"),
    "json": ("planner-json", "structured output by the DSL's JSON schema"),
    "grammar": ("planner-grammar", "structured output by the program grammar"),
    "grounded": ("planner-grounded", "the program grammar grounded in the request and the corpus's values"),
}
"""How decoding may be constrained, with the method family and description of each: free, by the DSL's
JSON schema (:func:`program_grammar`), or by the program grammar (:func:`serving.dsl.grammar.program_grammar_ebnf`)."""


@dataclasses.dataclass(frozen=True)
class Completion:
    """One generated completion, and the token budget when generation stopped there (else None)."""

    text: str
    cut_at: int | None = None


def execute(ctx: MethodContext, completions: Sequence[str | Completion], k: int) -> list[Outcome]:
    """Parse each completion and run the programs in one ``execute_many`` (:func:`rl.eval.outcome.run_programs`);
    a failure carries its layer. A completion that does not parse and was cut by the token budget fails as
    ``format truncated``."""
    read: list[Program | Failure] = []
    for got in completions:
        c = got if isinstance(got, Completion) else Completion(got)
        p = read_completion(c.text)
        if isinstance(p, Failure) and c.cut_at is not None:
            p = Failure(
                "format",
                "truncated",
                f"generation stopped at the budget of {c.cut_at} tokens ({p.code}: {p.message})",
            )
        read.append(p)
    return [Outcome.of(r) for r in run_programs(ctx.engine, read, k)]


FALLBACKS: tuple[str, ...] = ("rrf", "bm25", "dense", "self-query")
"""Methods a planner may fall back to (``?fallback=``): baselines that read no gold."""
GATES: tuple[str, ...] = ("unanimous", "familiar")
"""When a fused planner answers alone (``&gate=``, :attr:`Decoding.gate`)."""
GUIDED_TEMPERATURE = 0.7
"""Sampling temperature of execution-guided decoding's second pass (:class:`Decoding`)."""
MAX_SAMPLES = 64
"""Most samples per request execution-guided decoding may draw."""


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How ``planner:PATH`` decodes.

    ``samples`` > 0 turns on **execution-guided decoding** (Wang et al., 2018, *Robust Text-to-SQL
    Generation with Execution-Guided Decoding*). A request whose greedy program fails to parse, to validate
    or to execute, or ranks nothing, is decoded again as ``samples`` samples at ``temperature``. The samples
    run through the engine in one ``execute_many``. Among those that rank something, the ranking most of
    them agree on wins (self-consistency by execution result, ties to the earliest sample). When no sample
    ranks anything, the greedy outcome stands. A greedy program that ranks something is never touched.

    Only the engine judges: the gold and the relevant set are not visible to this pass, so it is a
    method like any other (test-time compute, bounded by ``samples``), named apart in reports
    (``planner:RUN-eg8``).
    """

    constraint: str = "none"
    """How decoding is constrained (:data:`CONSTRAINTS`): ``json`` for ``planner-json:PATH``, ``grammar``
    for ``planner-grammar:PATH``."""
    samples: int = 0
    """Samples of the second pass per failed request (0: greedy only)."""
    temperature: float = GUIDED_TEMPERATURE
    fallback: str | None = None
    """A method that answers the requests the planner left without a result, failed or empty (``rrf``:
    the BM25+dense fusion ``prore serve`` falls back to). The planner's answer is never replaced otherwise;
    the pair is a system, named apart (``planner:RUN-fb-rrf``), and its execution rate counts the
    fallback's answers."""
    fuse: str | None = None
    """A method fused with the planner for every request (``self-query``: what the query API's
    ``serving.api.fuse`` does). The greedy program and, with ``samples``, that many samples (drawn for every
    request, not only the failed ones) run in one ``execute_many``; their rankings and the method's are fused
    by weighted reciprocal rank (:func:`serving.engine.results.fuse`), the method weighted as all the
    planner's programs together (``samples + 1``), so neither side outvotes the other. A request none of
    whose programs runs keeps its failure, for ``fallback``. Named apart: ``planner:RUN-eg8-fuse-self-query``."""
    gate: str | None = None
    """When the planner answers alone and only the other requests are fused (``serving.api.fuse_gate``); needs
    ``fuse``, and names the run apart (``-unanimous``, ``-familiar``).

    - ``unanimous``: a request whose programs all rank the same (every one ran, and they agree:
      :func:`serving.engine.results.unanimous`). The planner is trusted where it is certain.
    - ``familiar``: a request worded like the planner's training requests (:mod:`serving.familiarity`: the
      nearest training request, by character n-grams, at least as similar as for 80% of the training requests
      themselves; the planner card's gate), whose greedy program ranks something. The planner is trusted on the wording it was trained
      on, which keeps the training templates' gold (test Hit@1), and second-guessed on any other."""

    def __post_init__(self) -> None:
        if self.constraint not in CONSTRAINTS:
            raise TrainError(f"planner constraint must be one of {', '.join(CONSTRAINTS)}, got {self.constraint!r}",
                             code="planner_option")  # fmt: skip
        if not 0 <= self.samples <= MAX_SAMPLES:
            raise TrainError(
                f"planner samples must be 0-{MAX_SAMPLES}, got {self.samples}", code="planner_option"
            )
        if not 0 < self.temperature <= 2:
            raise TrainError(
                f"planner temperature must be in (0, 2], got {self.temperature}", code="planner_option"
            )
        if self.fallback is not None and self.fallback not in FALLBACKS:
            raise TrainError(f"planner fallback must be one of {', '.join(FALLBACKS)}, got {self.fallback!r}",
                             code="planner_option")  # fmt: skip
        if self.gate is not None and (self.gate not in GATES or self.fuse is None):
            raise TrainError(f"planner gate must be one of {', '.join(GATES)}, with fuse, got {self.gate!r}",
                             code="planner_option")  # fmt: skip
        if self.fuse is not None and self.fuse not in FALLBACKS:
            raise TrainError(f"planner fuse must be one of {', '.join(FALLBACKS)}, got {self.fuse!r}",
                             code="planner_option")  # fmt: skip

    @property
    def suffix(self) -> str:
        """What the method's name adds: ``-eg8`` (``-eg8-t0.9`` at another temperature), ``-fuse-self-query``,
        ``-fb-rrf``, or nothing."""
        out = ""
        if self.samples:
            out = f"-eg{self.samples}" + (
                "" if self.temperature == GUIDED_TEMPERATURE else f"-t{self.temperature:g}"
            )
        out += (f"-fuse-{self.fuse}" if self.fuse else "") + (f"-{self.gate}" if self.gate else "")
        return out + (f"-fb-{self.fallback}" if self.fallback else "")


def parse_decoding(arg: str, *, constraint: str = "none") -> tuple[str, Decoding]:
    """The path and decoding of a ``planner:`` argument: ``PATH`` or
    ``PATH?samples=8[&temperature=0.7][&fuse=self-query[&gate=unanimous|familiar]][&fallback=rrf]``.

    >>> parse_decoding("runs/sft/final?samples=8")
    ('runs/sft/final', Decoding(constraint='none', samples=8, temperature=0.7, fallback=None, fuse=None, gate=None))
    """
    from urllib.parse import parse_qsl

    path, sep, query = arg.partition("?")
    if not sep:
        return path, Decoding(constraint)
    try:
        options = dict(parse_qsl(query, strict_parsing=True))
        unknown = set(options) - {"samples", "temperature", "fallback", "fuse", "gate"}
        if unknown:
            raise ValueError(
                f"unknown option {sorted(unknown)[0]!r} (samples, temperature, fallback, fuse, gate)"
            )
        decoding = Decoding(constraint, int(options.get("samples", 0)),
                            float(options.get("temperature", GUIDED_TEMPERATURE)), options.get("fallback"),
                            options.get("fuse"), options.get("gate"))  # fmt: skip
    except ValueError as exc:
        raise TrainError(f"bad planner options {query!r}: {exc}", code="planner_option") from exc
    return path, decoding


def vote(outcomes: Sequence[Outcome]) -> Outcome | None:
    """The outcome whose ranking most of ``outcomes`` agree on (:func:`serving.engine.results.consensus`)."""
    at = consensus([o.ids for o in outcomes])
    return None if at is None else outcomes[at]


Greedy = Callable[[MethodContext, Sequence[str]], list[Completion]]
"""A planner's greedy completion for each request."""
Sampler = Callable[[MethodContext, Sequence[str], int, float], list[list[Completion]]]
"""A planner's ``n`` sampled completions at ``temperature`` for each request."""


def guided_run(greedy: Greedy, sampler: Sampler, decoding: Decoding, path: str | None = None) -> Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]:  # fmt: skip
    """The method function of a planner that decodes by ``greedy``, then, under ``decoding``, by execution-guided
    samples from ``sampler`` and a fallback for what stays empty (:class:`Decoding`): ``planner:`` through vLLM
    and ``seq2seq:`` through transformers alike. ``path`` is the planner's model directory, whose card names
    its familiarity gate (``&gate=familiar``)."""

    def run(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        requests = [i.nl for i in batch]
        outcomes = execute(ctx, greedy(ctx, requests), k)
        retry = [i for i, o in enumerate(outcomes) if not o.ids]
        if decoding.fuse:
            outcomes = fused(ctx, batch, outcomes, k)
        elif decoding.samples and retry:
            n = decoding.samples
            drawn = sampler(ctx, [requests[i] for i in retry], n, decoding.temperature)
            tried = execute(ctx, [c for group in drawn for c in group], k)
            for j, i in enumerate(retry):
                outcomes[i] = vote(tried[j * n : (j + 1) * n]) or outcomes[i]
        empty = [i for i, o in enumerate(outcomes) if not o.ids]
        if decoding.fallback and empty:
            answered = get_method(decoding.fallback).run(ctx, [batch[i] for i in empty], k)
            for i, got in zip(empty, answered, strict=True):
                outcomes[i] = got
        return outcomes

    def fused(
        ctx: MethodContext, batch: Sequence[EvalInstance], first: list[Outcome], k: int
    ) -> list[Outcome]:
        assert decoding.fuse is not None
        n = decoding.samples
        drawn = sampler(ctx, [i.nl for i in batch], n, decoding.temperature) if n else [[] for _ in batch]
        tried = execute(ctx, [c for group in drawn for c in group], k)
        partner = get_method(decoding.fuse).run(ctx, batch, k)
        familiar = [False] * len(batch)
        if decoding.gate == "familiar":
            if path is None:
                raise TrainError(
                    "the familiar gate needs the planner's model directory", code="planner_option"
                )
            familiar = open_familiarity(path).familiar(ctx.domain, [i.nl for i in batch])
        out = []
        for j, (greedy_outcome, other) in enumerate(zip(first, partner, strict=True)):
            programs = [greedy_outcome, *tried[j * n : (j + 1) * n]]
            if not any(o.ok for o in programs):
                out.append(greedy_outcome)
                continue
            if decoding.gate == "unanimous" and unanimous([o.ids for o in programs]):
                out.append(greedy_outcome)
                continue
            if familiar[j] and greedy_outcome.ids:
                out.append(greedy_outcome)
                continue
            ranked = fuse([o.ids for o in programs] + [other.ids], [1.0] * (n + 1) + [float(n + 1)], k)
            out.append(Outcome.ranked([doc for doc, _ in ranked]))
        return out

    return run


def decoding_words(decoding: Decoding) -> str:
    """What a method's description adds for ``decoding``'s second pass and fallback.

    >>> decoding_words(Decoding(samples=8, fallback="rrf"))
    ', execution-guided with 8 samples at temperature 0.7, rrf answering what it leaves empty'
    """
    what = ""
    if decoding.samples:
        what += f", execution-guided with {decoding.samples} samples at temperature {decoding.temperature:g}"
    if decoding.fuse:
        what += f", fused with {decoding.fuse} by weighted RRF" + {
            None: "", "unanimous": " unless its programs are unanimous",
            "familiar": " unless the request is worded like its training requests"}[decoding.gate]  # fmt: skip
    if decoding.fallback:
        what += f", {decoding.fallback} answering what it leaves empty"
    return what
