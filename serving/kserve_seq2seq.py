"""The encoder-decoder planner's model server: an OpenAI-compatible chat route under KServe's ModelServer.

vLLM cannot run the MiniLM encoder-decoder planner (:mod:`serving.seq2seq`), so this is its predictor: KServe's
own ModelServer (the same server as the project's transformer, :mod:`serving.kserve`) with one
``OpenAIGenerativeModel`` that generates through transformers. It answers what ``prore serve`` and the
transformer send to vLLM, so both call it as they call vLLM:

- ``GET /openai/v1/models`` lists the model (``--model_name``, KServe's argument);
- ``POST /openai/v1/chat/completions``: the last user message is what the encoder reads (the planner card's
  ``request`` profile: ``ecommerce: wireless headphones under $200``); ``structured_outputs.grammar`` (Lark or
  GBNF: ``prore serve``'s ``grounded`` and ``grammar`` outputs) constrains decoding through llguidance, as vLLM's
  ``guidance`` backend does; ``n`` samples at ``temperature`` (greedy at 0), ``max_tokens`` (capped at the
  decoder's positions) and ``seed`` are honoured; ``"stream": true`` answers as server-sent events, the program
  in one delta.

A chat it cannot read (no user message, ``n`` over 16 or over 1 with ``stream``, a JSON-schema output, which needs vLLM's
xgrammar) is a 400 whose ``type`` is ``bad_chat``; a grammar llguidance cannot compile, a 400 of type
``planner_grammar``.

**Batching** (:class:`Batcher`): requests that arrive within ``--batch_wait_ms`` of one another (default 5) and
ask for the same decoding (the same ``n``, ``temperature`` and ``max_tokens``, with or without a grammar) are
generated in one ``generate`` call of up to ``--max_batch`` requests (default 8; 1 turns it off), each row
under its own grammar. A seeded sampled request is generated alone, so that its programs depend on its seed
only. A batch that fails (a grammar that compiles alone but not for llguidance's matcher) is generated again
one request at a time, so one request never fails the others. The batch sizes are the Prometheus histogram
``planner_batch_requests`` on KServe's ``/metrics``. Scale out with replicas.

Run it (``pip install '.[kserve,train]'``)::

    python -m serving.kserve_seq2seq --model_dir RUN/final --model_name planner --http_port 8081

then ``prore serve --planner-url http://127.0.0.1:8081/openai/v1 --planner-card RUN/final``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from serving.kserve import kserve_argv

_ARGV, sys.argv = sys.argv, kserve_argv(sys.argv)
try:
    import kserve  # type: ignore[import-untyped]

    from serving.kserve_openai import BAD_CHAT, ChatError, error_response, events, last_user_text
finally:
    sys.argv = _ARGV

# ruff: noqa: E402
from kserve.protocol.rest.openai import OpenAIGenerativeModel  # type: ignore[import-untyped]
from kserve.protocol.rest.openai.types import (  # type: ignore[import-untyped]
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    ErrorResponse,
    UsageInfo,
)

from serving.planner import MAX_GUIDED_SAMPLES
from serving.seq2seq import Generated, Seq2SeqError, Seq2SeqPlanner

MAX_SAMPLES = MAX_GUIDED_SAMPLES
"""Most programs one request may ask for (``n``): what ``prore serve``'s execution-guided decoding asks at most."""
MODEL_NAME = "planner"
"""The model's name where ``--model_name`` is not given (KServe gives the InferenceService's name)."""


def sampling(request: Any, max_tokens: int) -> dict[str, Any]:
    """The generation arguments of a chat-completions request; :class:`ChatError` for what is not served."""
    n = request.n or 1
    if n > MAX_SAMPLES:
        raise ChatError(f"n is {n}; at most {MAX_SAMPLES} programs per request", "n")
    if request.stream and n > 1:
        raise ChatError(f"n is {n}; a streamed answer carries one program", "n")
    structured = request.structured_outputs
    if request.response_format is not None or (structured is not None and structured.json is not None):
        raise ChatError("JSON-schema output needs vLLM's xgrammar; send structured_outputs.grammar (Lark or GBNF)",
                        "response_format")  # fmt: skip
    asked = request.max_completion_tokens or request.max_tokens
    return {
        "grammar": structured.grammar if structured is not None else None,
        "samples": n,
        "temperature": float(request.temperature or 0.0),
        "seed": request.seed,
        "max_tokens": min(int(asked), max_tokens) if asked else max_tokens,
    }


MAX_BATCH = 8
"""Most requests generated in one call (``--max_batch``)."""
BATCH_WAIT_MS = 5.0
"""How long the first request of a batch waits for others (``--batch_wait_ms``)."""


def _batch_histogram() -> Any:
    from prometheus_client import REGISTRY, Histogram

    name = "planner_batch_requests"
    known = REGISTRY._names_to_collectors.get(name)  # one per process, however many models are made
    return known or Histogram(name, "Requests generated together in one generate call",
                              buckets=(1, 2, 3, 4, 6, 8, 12, 16))  # fmt: skip


@dataclass
class _Pending:
    text: str
    grammar: str | None
    done: asyncio.Future[list[Generated]]


def batching_problem(max_batch: int, wait_ms: float) -> str | None:
    """What is wrong with a batching setting (``--max_batch``, ``--batch_wait_ms``), or None.

    >>> batching_problem(8, 5), batching_problem(0, 5)
    (None, '--max_batch must be at least 1 and --batch_wait_ms at least 0, got 0 and 5')
    """
    if max_batch >= 1 and wait_ms >= 0:
        return None
    return f"--max_batch must be at least 1 and --batch_wait_ms at least 0, got {max_batch} and {wait_ms:g}"


class Batcher:
    """Generates the requests that arrive together, and ask for the same decoding, in one call (module
    docstring, "Batching"). One worker task per event loop drains the queue; generation runs in a thread."""

    def __init__(self, planner: Seq2SeqPlanner, *, max_batch: int = MAX_BATCH,
                 wait_ms: float = BATCH_WAIT_MS) -> None:  # fmt: skip
        if problem := batching_problem(max_batch, wait_ms):
            raise ValueError(problem)
        self.planner, self.max_batch, self.wait_s = planner, max_batch, wait_ms / 1000
        self._queue: asyncio.Queue[tuple[tuple[Any, ...], _Pending]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self.sizes = _batch_histogram()

    async def generate(self, text: str, grammar: str | None, *, samples: int, temperature: float,
                       seed: int | None, max_tokens: int) -> list[Generated]:  # fmt: skip
        """``samples`` programs for ``text`` (under ``grammar``), as :meth:`Seq2SeqPlanner.generate` writes them."""
        params = {"samples": samples, "temperature": temperature, "max_tokens": max_tokens}
        if self.max_batch == 1 or (seed is not None and temperature > 0):
            self.sizes.observe(1)
            return await self._alone(text, grammar, seed=seed, **params)
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        pending = _Pending(text, grammar, asyncio.get_running_loop().create_future())
        await self._queue.put(((grammar is None, samples, temperature, max_tokens), pending))
        return await pending.done

    async def _alone(self, text: str, grammar: str | None, **params: Any) -> list[Generated]:
        grammars = None if grammar is None else [grammar]
        [got] = await asyncio.to_thread(self.planner.generate, [text], grammars=grammars, **params)
        return got

    async def _drain(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.wait_s
            while len(batch) < self.max_batch and (left := deadline - loop.time()) > 0:
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except TimeoutError:
                    break
            groups: dict[tuple[Any, ...], list[_Pending]] = {}
            for key, pending in batch:
                groups.setdefault(key, []).append(pending)
            for (free, samples, temperature, max_tokens), members in groups.items():
                params = {"samples": samples, "temperature": temperature, "max_tokens": max_tokens}
                await self._run(members, free, params)

    async def _run(self, members: list[_Pending], free: bool, params: dict[str, Any]) -> None:
        self.sizes.observe(len(members))
        try:
            got = await asyncio.to_thread(
                self.planner.generate, [m.text for m in members],
                grammars=None if free else [m.grammar or "" for m in members], **params,
            )  # fmt: skip
        except Exception as exc:
            if len(members) == 1:
                members[0].done.set_exception(exc)
                return
            for m in members:  # one request must not fail the others: each alone
                try:
                    m.done.set_result(await self._alone(m.text, m.grammar, **params))
                except Exception as alone:
                    m.done.set_exception(alone)
            return
        for m, programs in zip(members, got, strict=True):
            m.done.set_result(programs)


class Seq2SeqChatModel(OpenAIGenerativeModel):  # type: ignore[misc]
    """The encoder-decoder planner on KServe's OpenAI chat route."""

    def __init__(self, name: str, planner: Seq2SeqPlanner, *, max_batch: int = MAX_BATCH,
                 batch_wait_ms: float = BATCH_WAIT_MS) -> None:  # fmt: skip
        super().__init__(name)
        self.planner = planner
        self.batcher = Batcher(planner, max_batch=max_batch, wait_ms=batch_wait_ms)

    async def create_completion(self, request: CompletionRequest, raw_request: Any = None,
                                context: dict[str, Any] | None = None) -> ErrorResponse:  # fmt: skip
        return error_response(
            400, BAD_CHAT, "completions are not served: POST /openai/v1/chat/completions", "prompt"
        )

    async def create_chat_completion(self, request: ChatCompletionRequest, raw_request: Any = None,
                                     context: dict[str, Any] | None = None) -> Any:  # fmt: skip
        try:
            text = last_user_text(request.messages)
            asked = sampling(request, self.planner.max_tokens)
        except ChatError as exc:
            return error_response(400, BAD_CHAT, str(exc), exc.param)
        grammar = asked.pop("grammar")
        try:
            got = await self.batcher.generate(text, grammar, **asked)
        except Seq2SeqError as exc:
            return error_response(400, exc.code, exc.message, "structured_outputs")
        headers = (context or {}).get("headers") or {}
        rid = f"chatcmpl-{headers.get('x-request-id') or uuid.uuid4().hex}"
        model = request.model or self.name
        [prompt] = self.planner.prompt_tokens([text])
        completion = sum(g.tokens for g in got)
        usage = UsageInfo(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        if request.stream:
            options = request.stream_options
            include = options is not None and options.include_usage
            return events(rid, model, got[0].text, usage if include else None)
        choices = [
            ChatCompletionChoice(index=i, message=ChatMessage(role="assistant", content=g.text),
                                 finish_reason="stop" if g.finished else "length")
            for i, g in enumerate(got)
        ]  # fmt: skip
        return ChatCompletion(id=rid, model=model, usage=usage, choices=choices)


def arg_parser() -> argparse.ArgumentParser:
    """``python -m serving.kserve_seq2seq``'s arguments: ``--model_dir`` over KServe's ModelServer parser."""
    p = argparse.ArgumentParser(prog="python -m serving.kserve_seq2seq", allow_abbrev=False,
                                description="The encoder-decoder planner (prore train sft --arch minilm-seq2seq) "
                                "on an OpenAI-compatible chat route under KServe's ModelServer",
                                parents=[kserve.model_server.parser])  # fmt: skip
    p.add_argument("--model_dir", required=True, metavar="DIR",
                   help="the planner's saved directory (RUN/final: its card names arch minilm-seq2seq)")  # fmt: skip
    p.add_argument("--max_batch", type=int, default=MAX_BATCH, metavar="N",
                   help=f"most requests generated together (default {MAX_BATCH}; 1: one at a time)")  # fmt: skip
    p.add_argument("--batch_wait_ms", type=float, default=BATCH_WAIT_MS, metavar="MS",
                   help=f"how long a request waits for others to batch with (default {BATCH_WAIT_MS:g})")  # fmt: skip
    p.set_defaults(model_name=MODEL_NAME)
    return p


def main(argv: list[str] | None = None) -> None:
    parser = arg_parser()
    args = parser.parse_args(argv)
    if problem := batching_problem(args.max_batch, args.batch_wait_ms):
        parser.error(problem)
    try:
        planner = Seq2SeqPlanner(args.model_dir)
    except Seq2SeqError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    logging.getLogger(__name__).info("serving %s as %r", args.model_dir, args.model_name)
    kserve.ModelServer(
        http_port=args.http_port, grpc_port=args.grpc_port, enable_grpc=args.enable_grpc
    ).start(
        [
            Seq2SeqChatModel(
                args.model_name, planner, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms
            )
        ]
    )


if __name__ == "__main__":
    main()
