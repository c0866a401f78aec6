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
``planner_grammar``. Requests are generated one at a time per process (generation uses every core); scale
out with replicas.

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
from serving.seq2seq import Seq2SeqError, Seq2SeqPlanner

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


class Seq2SeqChatModel(OpenAIGenerativeModel):  # type: ignore[misc]
    """The encoder-decoder planner on KServe's OpenAI chat route."""

    def __init__(self, name: str, planner: Seq2SeqPlanner) -> None:
        super().__init__(name)
        self.planner = planner

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
            [got] = await asyncio.to_thread(
                self.planner.generate, [text], grammars=None if grammar is None else [grammar], **asked
            )
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
    p.set_defaults(model_name=MODEL_NAME)
    return p


def main(argv: list[str] | None = None) -> None:
    args = arg_parser().parse_args(argv)
    try:
        planner = Seq2SeqPlanner(args.model_dir)
    except Seq2SeqError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    logging.getLogger(__name__).info("serving %s as %r", args.model_dir, args.model_name)
    kserve.ModelServer(
        http_port=args.http_port, grpc_port=args.grpc_port, enable_grpc=args.enable_grpc
    ).start([Seq2SeqChatModel(args.model_name, planner)])


if __name__ == "__main__":
    main()
