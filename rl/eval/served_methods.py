"""The planner as ``prore serve`` asks it, as an evaluation method: ``planner-served:PATH?url=URL``.

``PATH`` is the planner's model directory (its card: the prompt profile and any exemplar index); ``URL`` is the
OpenAI-compatible base URL of the server that serves it (README "Serving", shell 1: ``http://127.0.0.1:8000/v1``).
Each request is one chat call built by the query API's own client (:class:`serving.planner.Planner`): the same
prompt, exemplars and decoding constraint (``output``, default ``grounded``, ``prore serve``'s default, with the
corpus's column values), so the report scores what a served search gets from the planner, not a copy of it.
The completions are read and executed as every planner method's are (:func:`rl.eval.guided.execute`).

Options: ``model`` (the served model's name; default: the one the endpoint lists), ``output``
(:data:`serving.planner.OUTPUTS`) and ``workers`` (calls in flight at once, default :data:`WORKERS`; vLLM
batches them). A server that does not answer fails the evaluation as :class:`EndpointUnavailable` (retryable).

One server answers every domain and every evaluation, so an evaluation of several domains pays one model start
(``make demo`` evaluates its planner this way, through the server it then serves the query API with).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from rl.errors import TrainError
from rl.eval.guided import Completion, execute
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome, register_family
from rl.eval.planner_methods import LLM_TIMEOUT_S, EndpointUnavailable, column_values, method_name
from serving.planner import OUTPUTS, Planner, PlannerSettings, PlannerUnavailable

FAMILY = "planner-served"
WORKERS = 32
"""Chat calls in flight at once: enough for vLLM to batch them, few enough to keep its queue short."""


@dataclass(frozen=True)
class Served:
    """A parsed ``planner-served:`` argument."""

    path: str
    url: str
    model: str | None = None
    output: str = "grounded"
    workers: int = WORKERS

    def settings(self, ctx: MethodContext) -> PlannerSettings:
        """The query API's planner settings for this endpoint and card (a breaker that never opens: one failed
        call fails the evaluation instead)."""
        base = PlannerSettings(url=self.url, model=self.model, output=self.output, card=self.path,
                               timeout_s=LLM_TIMEOUT_S, breaker_threshold=1_000_000, embedder=ctx.cfg.embedder)  # fmt: skip
        return base.with_card_profile(profile_given=False)


def parse_served(arg: str) -> Served:
    """The card path and options of a ``planner-served:`` argument.

    >>> parse_served("runs/sft/final?url=http://127.0.0.1:8000/v1&model=planner")
    Served(path='runs/sft/final', url='http://127.0.0.1:8000/v1', model='planner', output='grounded', workers=32)
    """
    path, _, query = arg.partition("?")
    try:
        options = dict(parse_qsl(query, strict_parsing=True)) if query else {}
        unknown = sorted(set(options) - {"url", "model", "output", "workers"})
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r} (url, model, output, workers)")
        url = options.get("url", "")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url= must be the http(s) base URL of the planner's server, got {url!r}")
        output = options.get("output", "grounded")
        if output not in OUTPUTS:
            raise ValueError(f"output= must be one of {', '.join(OUTPUTS)}, got {output!r}")
        workers = int(options.get("workers", WORKERS))
        if workers < 1:
            raise ValueError(f"workers= must be positive, got {workers}")
    except ValueError as exc:
        raise TrainError(f"bad {FAMILY} options {query!r}: {exc}", code="planner_option") from exc
    return Served(path, url.rstrip("/"), options.get("model"), output, workers)


def served_completions(ctx: MethodContext, served: Served, requests: Sequence[str]) -> list[Completion]:
    """The served planner's completion for each of ``requests``, ``served.workers`` calls at a time."""
    if not Path(served.path).is_dir():
        raise TrainError(f"no planner checkpoint at {served.path}", code="planner_path")
    settings = served.settings(ctx)
    values = {ctx.domain: column_values(ctx)} if served.output == "grounded" else None

    async def ask_all() -> list[tuple[str, bool]]:
        gate = asyncio.Semaphore(served.workers)
        async with Planner(settings, values=values) as planner:

            async def one(nl: str) -> tuple[str, bool]:
                async with gate:
                    return await planner.complete(ctx.domain, nl)

            return await asyncio.gather(*(one(nl) for nl in requests))

    try:
        answers = asyncio.run(ask_all())
    except PlannerUnavailable as exc:
        raise EndpointUnavailable(f"the planner at {served.url} failed: {exc}") from exc
    return [Completion(text, settings.max_tokens if cut else None) for text, cut in answers]


def served_run(served: Served) -> Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]:
    """The method function of ``planner-served:``."""

    def run(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        return execute(ctx, served_completions(ctx, served, [i.nl for i in batch]), k)

    return run


def served_spec(arg: str) -> MethodSpec:
    """The spec of ``planner-served:PATH?url=URL[&model=NAME][&output=O][&workers=N]``."""
    served = parse_served(arg)
    suffix = "" if served.output == "grounded" else f"-{served.output}"
    return MethodSpec(method_name(FAMILY, served.path) + suffix, served_run(served),
                      f"trained planner at {served.path} as prore serve asks it, served at {served.url} "
                      f"({served.output} decoding)")  # fmt: skip


register_family(FAMILY, served_spec)
