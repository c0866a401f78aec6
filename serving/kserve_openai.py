"""The project's KServe model with KServe's own OpenAI-style chat route.

:class:`ProRetrievalChatModel` is :class:`serving.kserve_model.ProRetrievalModel` (the v1 route) and also one of
KServe's ``OpenAIGenerativeModel`` models, so KServe's ModelServer serves it, under the same name, at
``GET /openai/v1/models`` and ``POST /openai/v1/chat/completions`` as well as ``/v1/models/<name>:predict``.

A chat request's last user message is the request in natural language; ``domain`` (a top-level field beside
``messages``, as vLLM's own extra parameters are) names the corpus, ``ecommerce`` when absent::

    {"model": "proretrieval", "domain": "ecommerce",
     "messages": [{"role": "user", "content": "wireless headphones under $200"}]}

The answer is a chat completion whose message content is the program the planner wrote, parsed, validated
and repaired (the ``program`` of the query API's ``/v1/plan``, as JSON text). It is not run. When the
planner gives no program the answer is an OpenAI error body, ``{"error": {"type", "message", "code",
"param"}}``, whose ``type`` and ``message`` are the v1 route's ``fallback.reason`` and ``fallback.detail``
(``planner_output_*``: HTTP 422; unreachable, timed out, circuit open: 503, as ``/v1/plan``: both use
:func:`serving.planner.planner_http_status`); a refused
request carries the v1 route's ``error`` and ``detail`` the same way (``nl_too_long``: 422). A chat the
model cannot read (no user message, a non-text part, ``n`` over 1) is a 400 of type ``bad_chat``; one that
is not a chat-completions request at all is FastAPI's 422. ``usage`` is the planner call's token counts, as
the predictor reported them. ``/openai/v1/completions`` answers 400: send a chat.

``"stream": true`` answers as server-sent events (``chat.completion.chunk``): the program in one content
delta, then ``finish_reason`` ``stop`` (with ``usage`` when ``stream_options.include_usage`` asks), then
``data: [DONE]``. The program is validated and repaired whole before it is sent, so it never arrives in
pieces, and a request that gets no program is answered with the error body, as without streaming.

Importing this module applies :mod:`serving.kserve_compat` (KServe 0.20's OpenAI types import vLLM paths
that vLLM 0.32 moved), so it needs ``vllm`` beside ``kserve`` (``pip install '.[kserve,train]'``).
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import AsyncIterator, Mapping
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError

from serving.api.schemas import PlanIn
from serving.api.service import Refused
from serving.kserve_compat import alias_moved_vllm_modules
from serving.kserve_model import ProRetrievalModel
from serving.planner import PlannerError, planner_http_status

alias_moved_vllm_modules()

# KServe's OpenAI modules import only once the aliases are registered.
# ruff: noqa: E402
from kserve.protocol.rest.openai import OpenAIGenerativeModel  # type: ignore[import-untyped]
from kserve.protocol.rest.openai.errors import create_error_response  # type: ignore[import-untyped]
from kserve.protocol.rest.openai.types import (  # type: ignore[import-untyped]
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    CompletionRequest,
    ErrorResponse,
    UsageInfo,
)

importlib.import_module(
    "kserve.protocol.rest.openai.endpoints"
)  # ModelServer's import; it would skip the routes silently

BAD_CHAT = "bad_chat"
"""The error ``type`` of a chat the model cannot read."""


class ChatError(ValueError):
    """A chat-completions request the model cannot read; ``param`` names the field."""

    def __init__(self, message: str, param: str = "messages") -> None:
        super().__init__(message)
        self.param = param


def _text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, Mapping)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise ChatError(f"messages[{index}].content[{j}] is not a text part; the request is text")
            parts.append(part["text"])
        return "\n".join(parts)
    raise ChatError(f"messages[{index}].content is not text")


def last_user_text(messages: Any) -> str:
    """The text of a chat's last user message; :class:`ChatError` when it has none, or not as text."""
    messages = list(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text(message.get("content"), index)
    raise ChatError("the chat has no user message; its last user message is the request")


def chat_request(request: Any) -> PlanIn:
    """The planning request of a chat: its last user message over ``domain`` (default ``ecommerce``)."""
    if request.n not in (None, 1):
        raise ChatError(f"n is {request.n}; the model writes one program per request", "n")
    query = last_user_text(request.messages)
    domain = (request.model_extra or {}).get("domain", "ecommerce")
    try:
        return PlanIn.model_validate({"query": query, "domain": domain})
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["loc"][:1] == ("domain",):
            raise ChatError(f"domain: {error['msg']}", "domain") from None
        raise ChatError(f"the last user message (the request): {error['msg']}") from None


def error_response(status: int, code: str, detail: str, param: str = "") -> Any:
    """KServe's OpenAI error body: ``type`` is the project's code, ``message`` its one-line detail."""
    return create_error_response(
        " ".join(detail.split()), err_type=code, param=param, status_code=HTTPStatus(status)
    )


class ProRetrievalChatModel(ProRetrievalModel, OpenAIGenerativeModel):  # type: ignore[misc]
    """The v1 model that also answers KServe's OpenAI chat route with the planner's program."""

    async def create_completion(self, request: CompletionRequest, raw_request: Any = None,
                                context: dict[str, Any] | None = None) -> ErrorResponse:  # fmt: skip
        return error_response(
            400, BAD_CHAT, "completions are not served: POST /openai/v1/chat/completions", "prompt"
        )

    async def create_chat_completion(self, request: ChatCompletionRequest, raw_request: Any = None,
                                     context: dict[str, Any] | None = None) -> ChatCompletion | ErrorResponse:  # fmt: skip
        await self._start()
        try:
            body = chat_request(request)
        except ChatError as exc:
            return error_response(400, BAD_CHAT, str(exc), exc.param)
        service = self.service
        try:
            service.engine_of(body.domain)
            service.check_nl(body.query)
            plan = await service.plan(body.domain, body.query)
        except Refused as exc:
            return error_response(exc.status, exc.code, exc.detail)
        except PlannerError as exc:
            return error_response(planner_http_status(exc), exc.code, exc.message)
        headers = (context or {}).get("headers") or {}
        rid = f"chatcmpl-{headers.get('x-request-id') or uuid.uuid4().hex}"
        model = request.model or self.name
        prompt, completion = plan.usage
        usage = UsageInfo(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        content = plan.program.to_json()
        if request.stream:
            options = request.stream_options
            return events(
                rid, model, content, usage if options is not None and options.include_usage else None
            )
        message = ChatMessage(role="assistant", content=content)
        return ChatCompletion(
            id=rid, model=model, usage=usage,
            choices=[ChatCompletionChoice(index=0, message=message, finish_reason="stop")],
        )  # fmt: skip


async def events(rid: str, model: str, content: str, usage: Any) -> AsyncIterator[str]:
    """The streamed answer: the program in one delta, the stop, the usage when asked for, then ``[DONE]``."""
    chunks = [
        ChatCompletionChunk(id=rid, model=model, choices=[
            ChunkChoice(index=0, delta=ChoiceDelta(role="assistant", content=content))]),
        ChatCompletionChunk(id=rid, model=model, choices=[
            ChunkChoice(index=0, delta=ChoiceDelta(), finish_reason="stop")]),
    ]  # fmt: skip
    if usage is not None:
        chunks.append(ChatCompletionChunk(id=rid, model=model, choices=[], usage=usage))
    for chunk in chunks:
        yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"
    yield "data: [DONE]\n\n"
