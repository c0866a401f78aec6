"""The one client of OpenAI-compatible HTTP APIs (vLLM's OpenAI server, TEI, KServe's Hugging Face runtime
at ``/openai/v1``, OpenAI itself), with one retry policy.

Every caller that talks to such an endpoint goes through :class:`OpenAIClient`: the query API's planner
(:mod:`serving.planner`), the ``llm:URL`` evaluation method (:mod:`rl.eval.planner_methods`), the benchmark's
paraphrase rewriter (:mod:`rl.datasets.rewriter`) and the ``openai`` embedder (:mod:`indexing.embedders.openai`).

- **Calls.** ``POST /chat/completions`` (:meth:`~OpenAIClient.chat`), ``POST /embeddings``
  (:meth:`~OpenAIClient.embeddings`) and ``GET /models`` (:meth:`~OpenAIClient.models`), each sync and async
  (``achat``, ``aembeddings``, ``amodels``); :meth:`~OpenAIClient.request` for any other path. The body of a
  chat call is the caller's, sent as given, so a server's extensions (vLLM's ``structured_outputs``) pass.
  No caller uses the legacy ``/completions``, so there is no method for it.
- **Where and who.** A base URL up to and including ``/v1``; an API key, given or read from an environment
  variable the caller names (none by default: a key is never sent to a host nobody chose it for), sent as a
  bearer token and never logged; a total timeout per HTTP call and an optional shorter connect timeout.
- **One retry policy** (:class:`RetryPolicy`). A refused or dropped connection, a timeout (unless
  ``retry_timeouts`` is off: the query API's planner, where a hung endpoint must cost one timeout), a 429
  and a 5xx are tried again, at most ``max_attempts`` calls in all. Between two tries the client waits
  what ``Retry-After`` asks (seconds or an HTTP date), capped at ``max_backoff_s``, or else an exponential
  backoff with full jitter: a uniform draw in ``[0, min(max_backoff_s, backoff_s * 2 ** (n - 1))]`` before
  try ``n + 1``, so callers refused together do not come back together. Any other 4xx is the caller's
  mistake and fails at once.
- **Errors.** One typed, one-line :class:`OpenAIError` per failure, after the last try:
  :class:`OpenAIUnreachable`, :class:`OpenAITimeout`, :class:`OpenAIStatusError` (with ``status`` and the
  start of the body) or :class:`OpenAIBadResponse`. Each caller turns them into its own error types and
  codes (the planner's decide the query API's fallbacks), so what a caller raises did not change.

**Why httpx and not the ``openai`` SDK.** httpx (encode's, actively maintained; 0.29 here) was already the
planner's and the ``llm:`` method's client and is installed wherever the project runs; it is now a core
dependency, since the embedder lives in ``indexing``. The SDK comes here only with vLLM (the ``train``
extra), is built on another HTTP stack (``httpx2``), and has a retry policy of its own that cannot be made
this one: 0-25 % jitter instead of full jitter, timeouts always retried, 408 and 409 retried too. Its
typed models would also carry vLLM's extensions only through ``extra_body``. Using it would mean switching
its retries off and writing these ones anyway. tenacity is not installed, and the policy is twenty lines.

>>> policy = RetryPolicy(max_attempts=3, backoff_s=0.5, max_backoff_s=4.0)
>>> [policy.retries_status(s) for s in (429, 500, 503, 400, 404)]
[True, True, True, False, False]
>>> 0.0 <= policy.delay(3) <= 2.0, policy.delay(1, retry_after=60.0)
(True, 4.0)
>>> retry_after_s("2"), retry_after_s("0.5"), retry_after_s(None), retry_after_s("soon")
(2.0, 0.5, None, None)
>>> retry_after_s("Thu, 01 Jan 1970 00:00:00 GMT")  # a date already past: no wait
0.0
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx

from core.errors import ConfigError, ProReError

DEFAULT_TIMEOUT_S = 60.0
"""Total time one HTTP call may take when the caller says nothing."""
BODY_CHARS = 300
"""How much of an error answer's body an :class:`OpenAIStatusError` keeps (whitespace folded to one line)."""


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date; a past date is 0), or None
    when there is none or it cannot be read."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None  # NaN is no answer
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed call is tried again, and how long the client waits first (see the module's docstring)."""

    max_attempts: int = 4
    """Calls in all, the first included (1: no retry)."""
    backoff_s: float = 0.5
    """Ceiling of the first wait; doubled for each further one (full jitter: the wait is drawn below it)."""
    max_backoff_s: float = 30.0
    """Longest wait between two tries, a ``Retry-After`` included."""
    retry_timeouts: bool = True
    """Whether a call that ran past its timeout is tried again."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError(
                f"a retry policy needs max_attempts >= 1 and waits >= 0, got {self}", code="retry_policy"
            )

    @staticmethod
    def retries_status(status: int) -> bool:
        """Whether an answer with HTTP ``status`` is worth another try: 429 and every 5xx."""
        return status == 429 or 500 <= status < 600

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (from 1): the server's ``Retry-After`` when it
        gave one (plus a jitter below :attr:`backoff_s`, so that callers refused together do not all come back
        together), else full jitter; never more than :attr:`max_backoff_s`."""
        if retry_after is not None:
            return min(self.max_backoff_s, retry_after + random.uniform(0.0, self.backoff_s))
        return random.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))


NO_RETRY = RetryPolicy(max_attempts=1)
"""One call, whatever happens (a readiness probe)."""


class OpenAIError(ProReError):
    """An OpenAI-compatible endpoint gave no usable answer, after every try the policy allowed."""

    code = "openai"

    def __init__(self, message: str, *, url: str, attempts: int, status: int | None = None) -> None:
        super().__init__(" ".join(message.split()))
        self.url = url
        self.attempts = attempts
        self.status = status
        """The HTTP status of the last answer (None when there was none)."""


class OpenAIUnreachable(OpenAIError):
    """No answer: the connection was refused or dropped. ``reason`` names httpx's error (``ConnectError``)."""

    code = "openai_unreachable"
    retryable = True

    def __init__(self, message: str, *, url: str, attempts: int, reason: str) -> None:
        super().__init__(message, url=url, attempts=attempts)
        self.reason = reason


class OpenAITimeout(OpenAIError):
    """No answer within the call's timeout."""

    code = "openai_timeout"
    retryable = True


class OpenAIStatusError(OpenAIError):
    """The endpoint answered with an error status; ``body`` is the start of what it said, on one line."""

    code = "openai_status"
    status: int

    def __init__(self, message: str, *, url: str, attempts: int, status: int, body: str) -> None:
        super().__init__(message, url=url, attempts=attempts, status=status)
        self.body = body
        self.retryable = RetryPolicy.retries_status(status)


class OpenAIBadResponse(OpenAIError):
    """The endpoint answered 2xx with something that is not what the call returns (not JSON, wrong shape)."""

    code = "openai_bad_response"


class Usage(NamedTuple):
    """A chat call's token counts, as an OpenAI-compatible endpoint reports them (``usage``)."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Reply:
    """A 2xx answer's JSON body, and the HTTP calls it took."""

    data: Any
    attempts: int
    status: int


@dataclass(frozen=True)
class Choice:
    """One choice of a chat completion."""

    index: int
    text: str | None
    """The message's content; None when it has none, or not as a string."""
    finish_reason: str | None


@dataclass(frozen=True)
class ChatCompletion:
    """A chat completion: its choices in the order of their ``index``, its usage, the HTTP calls it took."""

    choices: tuple[Choice, ...]
    usage: Usage
    """Zeros when the endpoint reported none (or nonsense)."""
    attempts: int


@dataclass(frozen=True)
class Embeddings:
    """One vector per input, in input order (by the answer's ``index``), and the HTTP calls it took."""

    vectors: list[list[float]]
    attempts: int


class OpenAIClient:
    """A client of the OpenAI-compatible API at ``base_url`` (up to and including ``/v1``).

    Sync and async calls share the settings and the policy; each kind opens its httpx client on first use
    (the async one belongs to the event loop that first uses it: one client per loop). The sync one may be
    shared by threads. :meth:`close` / :meth:`aclose` close them; closing twice is harmless.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._lock = threading.Lock()
        self._sync: httpx.Client | None = None
        self._async: httpx.AsyncClient | None = None

    @property
    def headers(self) -> httpx.Headers:
        """The headers every call carries (the bearer token when there is a key)."""
        return httpx.Headers(self._headers)

    def url(self, path: str) -> str:
        """The URL of ``path`` under the base URL."""
        return f"{self.base_url}/{path.lstrip('/')}"

    def _timeout(self, timeout_s: float | None) -> httpx.Timeout:
        total = self.timeout_s if timeout_s is None else timeout_s
        return httpx.Timeout(
            total, connect=total if self.connect_timeout_s is None else self.connect_timeout_s
        )

    def __getstate__(self) -> dict[str, Any]:
        # Picklable (a Ray task's argument): the open httpx clients and the lock stay behind.
        return {**self.__dict__, "_lock": None, "_sync": None, "_async": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    # -- the one retry loop: what each try's outcome means ------------------------------------------

    def _judge(
        self,
        url: str,
        attempt: int,
        policy: RetryPolicy,
        timeout_s: float | None,
        response: httpx.Response | None,
        error: Exception | None,
    ) -> Reply | float:
        """The reply of a try that succeeded, or the seconds to wait before the next; raises the typed error
        when this try failed and the policy allows no other."""
        wait_for: float | None = None
        failure: OpenAIError
        tries = f" (after {attempt} tries)" if attempt > 1 else ""
        if response is None:
            if isinstance(error, httpx.TimeoutException):
                limit = self.timeout_s if timeout_s is None else timeout_s
                failure = OpenAITimeout(
                    f"{url} did not answer within {limit:g} s{tries}", url=url, attempts=attempt
                )
                again = policy.retry_timeouts
            else:
                reason = type(error).__name__
                failure = OpenAIUnreachable(
                    f"cannot reach {url}{tries}: {reason}: {error}", url=url, attempts=attempt, reason=reason
                )
                # a scheme httpx cannot speak, or a malformed URL, stays so
                again = isinstance(error, httpx.TransportError) and not isinstance(
                    error, httpx.UnsupportedProtocol
                )
        elif 200 <= response.status_code < 300:
            try:
                return Reply(response.json(), attempt, response.status_code)
            except ValueError:
                raise OpenAIBadResponse(
                    f"{url} did not answer with JSON", url=url, attempts=attempt, status=response.status_code
                ) from None
        else:
            status = response.status_code
            body = " ".join(response.text.split())[:BODY_CHARS]
            failure = OpenAIStatusError(
                f"{url} answered HTTP {status}{tries}: {body}",
                url=url,
                attempts=attempt,
                status=status,
                body=body,
            )
            again = policy.retries_status(status)
            wait_for = retry_after_s(response.headers.get("Retry-After"))
        if not again or attempt >= policy.max_attempts:
            raise failure
        return policy.delay(attempt, wait_for)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """``method`` on ``path`` with the JSON ``body``, tried as the policy (``retry``, else the client's)
        says; the 2xx answer's JSON, or the typed error of the last try."""
        policy, url, attempt = retry or self.retry, self.url(path), 0
        while True:
            attempt += 1
            response: httpx.Response | None = None
            error: Exception | None = None
            try:
                response = self._client().request(method, url, json=body, timeout=self._timeout(timeout_s))
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                error = exc
            step = self._judge(url, attempt, policy, timeout_s, response, error)
            if isinstance(step, Reply):
                return step
            time.sleep(step)

    async def arequest(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """:meth:`request`, async."""
        policy, url, attempt = retry or self.retry, self.url(path), 0
        while True:
            attempt += 1
            response: httpx.Response | None = None
            error: Exception | None = None
            try:
                response = await self._aclient().request(
                    method, url, json=body, timeout=self._timeout(timeout_s)
                )
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                error = exc
            step = self._judge(url, attempt, policy, timeout_s, response, error)
            if isinstance(step, Reply):
                return step
            await asyncio.sleep(step)

    # -- the calls --------------------------------------------------------------------------------------

    def chat(
        self, body: Mapping[str, Any], *, retry: RetryPolicy | None = None, timeout_s: float | None = None
    ) -> ChatCompletion:
        """``POST /chat/completions`` with ``body`` (``model``, ``messages`` and whatever else the server reads)."""
        url = self.url("chat/completions")
        return _chat_completion(
            self.request("POST", "chat/completions", body, retry=retry, timeout_s=timeout_s), url
        )

    async def achat(
        self, body: Mapping[str, Any], *, retry: RetryPolicy | None = None, timeout_s: float | None = None
    ) -> ChatCompletion:
        """:meth:`chat`, async."""
        url = self.url("chat/completions")
        return _chat_completion(
            await self.arequest("POST", "chat/completions", body, retry=retry, timeout_s=timeout_s), url
        )

    def embeddings(
        self,
        model: str,
        texts: Sequence[str],
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Embeddings:
        """``POST /embeddings`` of ``texts`` by ``model``, as float lists."""
        url, body = self.url("embeddings"), {"model": model, "input": list(texts), "encoding_format": "float"}
        return _embeddings(self.request("POST", "embeddings", body, retry=retry, timeout_s=timeout_s), url)

    async def aembeddings(
        self,
        model: str,
        texts: Sequence[str],
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Embeddings:
        """:meth:`embeddings`, async."""
        url, body = self.url("embeddings"), {"model": model, "input": list(texts), "encoding_format": "float"}
        return _embeddings(
            await self.arequest("POST", "embeddings", body, retry=retry, timeout_s=timeout_s), url
        )

    def models(self, *, retry: RetryPolicy | None = None, timeout_s: float | None = None) -> list[str]:
        """The ids ``GET /models`` lists, in its order."""
        url = self.url("models")
        return _model_ids(self.request("GET", "models", retry=retry, timeout_s=timeout_s), url)

    async def amodels(self, *, retry: RetryPolicy | None = None, timeout_s: float | None = None) -> list[str]:
        """:meth:`models`, async."""
        url = self.url("models")
        return _model_ids(await self.arequest("GET", "models", retry=retry, timeout_s=timeout_s), url)

    # -- the httpx clients ------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._sync is None:
                self._sync = httpx.Client(headers=self._headers, timeout=self._timeout(None))
            return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        if self._async is None:
            self._async = httpx.AsyncClient(headers=self._headers, timeout=self._timeout(None))
        return self._async

    def close(self) -> None:
        """Close the sync httpx client (an async one needs :meth:`aclose`)."""
        with self._lock:
            client, self._sync = self._sync, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close both httpx clients."""
        self.close()
        client, self._async = self._async, None
        if client is not None:
            await client.aclose()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _bad(reply: Reply, url: str, what: str) -> OpenAIBadResponse:
    return OpenAIBadResponse(
        f"{url} answered without {what}", url=url, attempts=reply.attempts, status=reply.status
    )


def _usage(data: Any) -> Usage:
    """The answer's ``usage`` token counts; zeros for an endpoint that reports none (or nonsense)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return Usage(0, 0)
    counts = (usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return Usage(0, 0)
    return Usage(*counts)


def _chat_completion(reply: Reply, url: str) -> ChatCompletion:
    choices = []
    try:
        for c in reply.data["choices"]:
            content = c["message"].get("content")
            text = content if isinstance(content, str) else None
            choices.append(Choice(int(c.get("index") or 0), text, c.get("finish_reason")))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise _bad(reply, url, "a chat completion") from None
    return ChatCompletion(tuple(sorted(choices, key=lambda c: c.index)), _usage(reply.data), reply.attempts)


def _embeddings(reply: Reply, url: str) -> Embeddings:
    try:
        items = sorted(reply.data["data"], key=lambda d: int(d["index"]))
        vectors = [item["embedding"] for item in items]
    except (KeyError, TypeError, ValueError):
        raise _bad(reply, url, "an OpenAI 'data' list of embeddings") from None
    return Embeddings(vectors, reply.attempts)


def _model_ids(reply: Reply, url: str) -> list[str]:
    try:
        return [str(m["id"]) for m in reply.data["data"]]
    except (KeyError, TypeError):
        raise _bad(reply, url, "a model list") from None
