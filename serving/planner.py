"""The planner client: natural language in, a typed :class:`~serving.dsl.Program` out, from any
OpenAI-compatible chat-completions endpoint (a vLLM server, KServe's Hugging Face runtime at
``/openai/v1``, or another provider).

- **Prompt.** :func:`serving.prompt.messages`, the one builder training uses too.
- **Structured output** (``output``, :data:`OUTPUTS`), exactly as evaluation decodes: the request carries
  vLLM's ``structured_outputs={"grammar": ...}`` with :func:`serving.dsl.structured.constraint_grammar` of
  the corpus under :data:`~serving.dsl.structured.STRUCTURED_LIMITS`, the grammar ``planner-grounded:``,
  ``planner-grammar:`` and ``planner-json:`` hand vLLM's offline engine. ``grounded`` (``prore serve``'s
  default): the program grammar whose search phrases are spans of the request and whose string literals are
  the corpus's values (:mod:`serving.dsl.grounding`; the values are read from the served index at start).
  ``grammar``: the program grammar (:func:`serving.dsl.grammar.program_grammar_ebnf`): typed SQL,
  placeholders matched to entries, so what the planner writes also passes validation, as EBNF that either
  backend reads. ``grounded`` goes in llguidance's Lark dialect, for a server on vLLM's ``guidance`` backend
  (vLLM fixes an engine's backend at its first structured request). ``json``: the DSL's JSON schema
  with the programs' own separators (``", "``, ``": "``) and no other whitespace, written by xgrammar, for a
  server on xgrammar (vLLM's default). (The JSON schema as ``response_format`` cannot say that: vLLM 0.32
  then admits any whitespace, where a weak model can loop until its budget ends, or with
  ``disable_any_whitespace`` forces ``","`` and ``":"``, which a trained planner never saw.) ``free``: no
  constraint.
- **Model.** ``model`` names the served model (vLLM's ``--served-model-name``); without one the client asks
  the endpoint's ``/models`` once and uses its only model (several: ``planner_model``, name one).
- **Repair.** The completion is read with the reward's own parser (:func:`serving.dsl.extract_program`).
  A near miss gets a bounded repair, one step each at most: raw control characters inside strings are
  escaped, and text around the one JSON object is cut. What still fails is a :class:`PlannerOutputError`
  carrying the parser's code.
- **Timeouts, retries, circuit breaker.** Calls go through :class:`core.openai_client.OpenAIClient`
  and its one retry policy. Every call has a connect and a total timeout. A refused connection, a 429 or a
  5xx is retried (``retries`` times) after the server's ``Retry-After`` or an exponential backoff with full
  jitter, either capped at ``max_backoff_s``; a timeout is not retried, so a hung endpoint costs one
  timeout. After ``breaker_threshold`` failed calls in a row the
  breaker opens: calls fail at once with code ``planner_circuit_open`` for ``breaker_reset_s``, then one
  trial call decides whether it closes again. A dead endpoint therefore costs one timeout, not one per
  request.

>>> settings = PlannerSettings(url="http://127.0.0.1:9/v1", model="planner")
>>> settings.chat_url
'http://127.0.0.1:9/v1/chat/completions'
>>> repair_completion('Sure! {"sql": "SELECT id FROM products", "retrieval_list": []} Hope it helps.')
('{"sql": "SELECT id FROM products", "retrieval_list": []}', ['surrounding_text'])
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

from core.errors import ProReError
from core.openai_client import (
    NO_RETRY,
    OpenAIBadResponse,
    OpenAIClient,
    OpenAIError,
    OpenAIStatusError,
    OpenAITimeout,
    OpenAIUnreachable,
    RetryPolicy,
    Usage,
)
from indexing.config import EmbedderConfig
from indexing.schema import schema_for
from serving.dsl import DEFAULT_LIMITS, DslLimits, FormatError, Program, extract_program
from serving.dsl.json_text import json_runs
from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
from serving.exemplars import Shot, open_for_planner, shots_for
from serving.prompt import CARDLESS_PROFILE, Profile, PromptConfig, messages, planner_profile


class PlannerError(ProReError):
    """The planner gave no program: unreachable, too slow, refusing, or writing something unreadable."""

    code = "planner"


class PlannerUnavailable(PlannerError):
    """The endpoint could not be reached, answered an error, timed out, or the circuit breaker is open."""

    code = "planner_unavailable"
    retryable = True


class PlannerOutputError(PlannerError):
    """The completion is not a program, even after the bounded repair; ``code`` is the parser's own."""

    def __init__(self, message: str, *, code: str, completion: str) -> None:
        super().__init__(message, code=f"planner_output_{code}")
        self.completion = completion


def planner_http_status(error: PlannerError) -> int:
    """The HTTP status of a planner that gave no program, one rule for every route that answers it: 422 when
    it wrote something that is not a program (``planner_output_*``: the same request fails the same way),
    else 503 (unreachable, timed out, circuit open, not configured: worth a retry later).

    >>> planner_http_status(PlannerOutputError("no JSON object", code="no_json", completion="hi"))
    422
    >>> planner_http_status(PlannerUnavailable("connection refused", code="planner_unavailable"))
    503
    """
    return 422 if error.code.startswith("planner_output_") else 503


OUTPUTS: tuple[str, ...] = ("json", "grammar", "grounded", "free")
"""How the planner's decoding is constrained: the JSON schema, the program grammar, the program grammar
grounded in the request and the corpus's column values (:mod:`serving.dsl.grounding`), or not at all."""

MAX_GUIDED_SAMPLES = 16
"""Most samples one search may ask the planner for (each is decoded and executed)."""


@dataclass(frozen=True)
class PlannerSettings:
    """Where the planner is served and how it is called; ``prore serve`` reads it from the config file's
    ``serving.planner`` section, the ``PRORE_PLANNER_*`` variables of :attr:`ENVIRONMENT` and its flags."""

    ENVIRONMENT: ClassVar[Mapping[str, str]] = {
        "PRORE_PLANNER_URL": "url",
        "PRORE_PLANNER_MODEL": "model",
        "PRORE_PLANNER_PROFILE": "profile",
        "PRORE_PLANNER_OUTPUT": "output",
        "PRORE_PLANNER_GUIDED_SAMPLES": "guided_samples",
    }
    """Environment variables over the config file's keys (the Helm chart's API deployment sets them); read
    where the file is, by :func:`indexing.config.load_config`."""

    url: str = ""
    """OpenAI-compatible base URL of the planner, up to and including ``/v1`` (``http://host:8000/v1``;
    KServe's Hugging Face runtime: ``http://host/openai/v1``). Empty: no planner, and ``prore serve`` answers
    every search with the fallback."""
    model: str | None = None
    """The served model name (vLLM's ``--served-model-name``, or the checkpoint directory); None: the one
    model the endpoint lists at ``/models``, asked once."""
    api_key: str | None = None
    """Sent as a bearer token when set; never logged. ``prore serve --planner-key-env VAR`` reads it from the
    environment variable ``VAR`` instead of a file."""
    profile: Profile = CARDLESS_PROFILE
    """Prompt profile the planner was trained with (:mod:`serving.prompt`); with a ``card``, the card's instead
    (a checkpoint without a card gets ``full``)."""
    structured: bool = True
    """Constrain decoding (``False``: free decoding, whatever ``output`` says)."""
    output: str = "json"
    """How the planner's decoding is constrained through vLLM's ``structured_outputs``, as evaluation's
    ``planner-grounded:``, ``planner-grammar:`` and ``planner-json:`` constrain it (:data:`OUTPUTS`,
    :func:`serving.dsl.structured.constraint_grammar`): ``grounded`` (the program grammar whose search phrases
    are spans of the request and whose string literals are the corpus's values) and ``grammar`` (the program
    grammar: typed SQL, placeholders matched to entries), both for a vLLM server on its guidance backend;
    ``json`` (the DSL's JSON schema with the programs' separators, for a server on xgrammar, vLLM's default,
    and KServe's runtime); or ``free``. ``prore serve`` defaults to ``grounded``."""
    schema_limits: DslLimits = field(default_factory=lambda: STRUCTURED_LIMITS)
    """Limits the grammar sent to the server quotes: evaluation's (:data:`~serving.dsl.structured.STRUCTURED_LIMITS`)
    by default; tighter limits bound what a weak model can write."""
    max_tokens: int = 512
    """Most tokens the planner may write for one program."""
    temperature: float = 0.0
    """Sampling temperature of the first call (0: greedy, as evaluation decodes)."""
    timeout_s: float = 10.0
    """Total time one call to the endpoint may take."""
    connect_timeout_s: float = 2.0
    """Time to connect to the endpoint."""
    retries: int = 2
    """Further tries after a refused connection, a 429 or a 5xx (timeouts are not retried)."""
    backoff_s: float = 0.2
    """Ceiling of the first backoff, doubled on each retry; the wait is drawn below it (full jitter)."""
    max_backoff_s: float = 2.0
    """Longest wait between two tries, a ``Retry-After`` included (a stage deadline still caps the whole call)."""
    breaker_threshold: int = 1
    """Failed calls in a row that open the circuit breaker."""
    breaker_reset_s: float = 30.0
    """How long an open breaker refuses calls before one trial call."""
    guided_samples: int = 0
    """Execution-guided decoding: when the planner's program cannot be read, fails validation or fails in
    the engine, one more call asks for this many samples (``n``, at most 16) at ``guided_temperature``, and the
    search answers with the ranking most of the samples that run agree on, before any fallback (0: off)."""
    guided_temperature: float = 0.7
    """Sampling temperature of the guided samples."""
    card: str | None = None
    """The planner's model directory (or its ``planner.json``): its card names the prompt profile the planner
    was trained with (which wins over ``profile``) and, when it names an exemplar index
    (:mod:`serving.exemplars`), each prompt carries the exemplars that index picks, as in training."""
    embedder: EmbedderConfig | None = None
    """How exemplar requests are embedded here (the backend; the vector space is the index's); None: the
    config's ``embedder`` section."""

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ProReError(f"planner output must be one of {', '.join(OUTPUTS)}, got {self.output!r}",
                             code="planner_output")  # fmt: skip
        if isinstance(self.guided_samples, bool) or not 0 <= self.guided_samples <= MAX_GUIDED_SAMPLES:
            raise ProReError(f"guided samples must be an integer from 0 to {MAX_GUIDED_SAMPLES}, got "
                             f"{self.guided_samples!r}", code="planner_guided_samples")  # fmt: skip

    def with_card_profile(self, *, profile_given: bool) -> PlannerSettings:
        """These settings with the prompt profile a served planner gets: its card's when it has one, which wins
        over a profile the file or the environment gives (``profile_given``: a flag gave it too, an error)."""
        if self.card is None:
            return self
        return replace(self, profile=planner_profile(self.profile if profile_given else None, self.card))

    @property
    def chat_url(self) -> str:
        return self.url.rstrip("/") + "/chat/completions"

    @property
    def models_url(self) -> str:
        return self.url.rstrip("/") + "/models"

    @property
    def retry(self) -> RetryPolicy:
        """The client's retry policy: ``retries`` more tries, timeouts never retried."""
        return RetryPolicy(max_attempts=max(1, self.retries + 1), backoff_s=self.backoff_s,
                           max_backoff_s=self.max_backoff_s, retry_timeouts=False)  # fmt: skip


def prepare(settings: PlannerSettings, domains: Iterable[str]) -> None:
    """Build each domain's decoding constraint now (they are cached): a missing xgrammar (which ``json``
    compiles its grammar with) or llguidance (whose dialect ``grammar`` and ``grounded`` are converted to)
    fails at start in one line, and the first request pays no conversion."""
    if settings.structured and settings.output != "free":
        for domain in domains:
            constraint_grammar(schema_for(domain), settings.output, settings.schema_limits)


@dataclass(frozen=True)
class Plan:
    """A program the planner wrote, with how it was obtained."""

    program: Program
    completion: str
    """The raw completion text."""
    repairs: tuple[str, ...]
    """Repair steps applied (``control_chars``, ``surrounding_text``); empty when it parsed as written."""
    attempts: int
    """HTTP calls made (1 unless retried)."""
    ms: float
    """Wall time of the whole plan, retries included."""
    usage: Usage = field(default_factory=lambda: Usage(0, 0))
    """The tokens of the chat call that wrote it, as the endpoint counted them (zeros when it did not say; for
    :meth:`Planner.samples`, the whole call's, shared by its samples)."""


class CircuitBreaker:
    """Opens after ``threshold`` failures in a row; after ``reset_s`` lets one trial call through.

    A trial that ends without a verdict (its caller cancelled, as a request's deadline cancels its planning)
    gives its turn back (:meth:`abandon`), and a trial granted ``reset_s`` ago without one is given up: either had
    left the breaker refusing every call for good (a test suite saw ``planner_circuit_open`` with the planner up).
    """

    def __init__(self, threshold: int, reset_s: float) -> None:
        self.threshold = max(1, threshold)
        self.reset_s = reset_s
        self.failures = 0
        self.opened_at: float | None = None
        self._trial_at: float | None = None

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        if self.opened_at is None:
            return "closed"
        return "half_open" if time.monotonic() - self.opened_at >= self.reset_s else "open"

    def allow(self) -> bool:
        state = self.state
        if state == "closed":
            return True
        now = time.monotonic()
        if state == "half_open" and (self._trial_at is None or now - self._trial_at >= self.reset_s):
            self._trial_at = now
            return True
        return False

    def abandon(self) -> None:
        """The call :meth:`allow` let through ended without a verdict: a waiting trial may go."""
        self._trial_at = None

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self._trial_at = None

    def failure(self) -> None:
        self.failures += 1
        self._trial_at = None
        if self.failures >= self.threshold:
            self.opened_at = time.monotonic()


_CONTROL = re.compile(r"[\x00-\x1f]")


def _escape_control_chars(text: str) -> str:
    """Raw control characters inside JSON strings written as ``\\u00XX`` escapes (outside strings they
    are whitespace or an error either way, and stay; so does one a backslash escapes)."""
    runs = [text[start:end] if where != "text" else _CONTROL.sub(_escaped, text[start:end])
            for start, end, where in json_runs(text, split_strings=True)]  # fmt: skip
    return "".join(runs)


def _escaped(raw: re.Match[str]) -> str:
    return f"\\u{ord(raw.group()):04x}"


_DECODER = json.JSONDecoder()


def repair_completion(
    completion: str, *, max_chars: int = DEFAULT_LIMITS.max_program_chars
) -> tuple[str, list[str]]:
    """The completion with at most two near-miss repairs applied, and the names of those applied.

    ``control_chars``: raw control characters inside strings escaped. ``surrounding_text``: the first JSON
    object kept, text before and after it dropped. The result still goes through the strict parser.
    """
    text = completion[: max_chars * 2]
    steps: list[str] = []
    escaped = _escape_control_chars(text)
    if escaped != text:
        text = escaped
        steps.append("control_chars")
    start = text.find("{")
    if start >= 0:
        try:
            _, end = _DECODER.raw_decode(text, start)
        except ValueError:
            end = -1
        if end > 0 and text[start:end].strip() != text.strip():
            text = text[start:end]
            steps.append("surrounding_text")
    return text, steps


def read_program(completion: str, *, limits: DslLimits = DEFAULT_LIMITS) -> tuple[Program, tuple[str, ...]]:
    """The program of a completion: strict parse first, then the bounded repair; :class:`PlannerOutputError`."""
    try:
        return extract_program(completion, limits=limits), ()
    except FormatError as first:
        repaired, steps = repair_completion(completion, max_chars=limits.max_program_chars)
        if steps:
            try:
                return extract_program(repaired, limits=limits), tuple(steps)
            except FormatError:
                pass
        raise PlannerOutputError(
            f"the planner's completion is not a program: {first.message}",
            code=first.code,
            completion=completion,
        ) from None


class Answer(NamedTuple):
    """One chat call's choices: each one's text and whether ``max_tokens`` cut it; the HTTP calls and tokens it took."""

    texts: list[str]
    cut: list[bool]
    attempts: int
    usage: Usage


class Planner:
    """An async client of a planner endpoint; one per event loop (its :class:`OpenAIClient` holds an
    ``httpx.AsyncClient``)."""

    def __init__(self, settings: PlannerSettings, *, dsl_limits: DslLimits = DEFAULT_LIMITS,
                 values: Mapping[str, Mapping[str, Sequence[str]]] | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.dsl_limits = dsl_limits
        self.values = dict(values or {})
        """Each domain's column values (:func:`serving.dsl.grounding.read_column_values`), which the
        ``grounded`` output narrows string literals to; a domain without them keeps the free string rule."""
        self.breaker = CircuitBreaker(settings.breaker_threshold, settings.breaker_reset_s)
        self._client = OpenAIClient(settings.url, api_key=settings.api_key, timeout_s=settings.timeout_s,
                                    connect_timeout_s=settings.connect_timeout_s, retry=settings.retry)  # fmt: skip
        self._model = settings.model
        """The model asked for: the settings' name, or the one the endpoint lists (:meth:`model`)."""
        self.exemplars = open_for_planner(settings.card, settings.embedder) if settings.card else None
        """The card's exemplar index and k, opened at start (a card naming a missing index fails here)."""

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Planner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def payload(self, domain: str, request: str, shots: Sequence[Shot] = ()) -> dict[str, Any]:
        """The chat-completions request body for ``request`` over ``domain``'s corpus, with its exemplars."""
        s = self.settings
        body: dict[str, Any] = {
            "model": self._model,
            "messages": messages(
                domain, request, shots=shots, config=PromptConfig(profile=s.profile, limits=self.dsl_limits)
            ),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
        }
        if s.structured and s.output != "free":
            # grounded goes in llguidance's own dialect (the server runs vLLM's guidance backend); grammar as EBNF,
            # which either backend reads, so it also works against a server on xgrammar beside json
            grammar = constraint_grammar(schema_for(domain), s.output, s.schema_limits, request=request,
                                         values=self.values.get(domain))  # fmt: skip
            body["structured_outputs"] = {"grammar": grammar}
        return body

    async def shots(self, domain: str, request: str) -> list[Shot]:
        """The exemplars of ``request`` under the card's index (none without one), picked off the event loop
        (embedding and the vector search block)."""
        if self.exemplars is None:
            return []
        got = await asyncio.to_thread(shots_for, self.exemplars, domain, [request])
        return got[0]

    async def model(self) -> str:
        """The model name requests carry: the settings' name, else the endpoint's only model, listed once
        (:class:`PlannerUnavailable` when it lists none, several, or does not answer)."""
        if self._model is not None:
            return self._model
        url = self.settings.models_url
        try:
            names = await self._client.amodels()
        except OpenAITimeout:
            raise PlannerUnavailable(f"the planner did not list its models within {self.settings.timeout_s:g} s",
                                     code="planner_timeout") from None  # fmt: skip
        except (OpenAIStatusError, OpenAIBadResponse) as exc:
            raise PlannerUnavailable(f"the planner's {url} answered HTTP {exc.status} without a model list",
                                     code="planner_bad_response") from None  # fmt: skip
        except OpenAIUnreachable as exc:
            raise PlannerUnavailable(f"cannot reach the planner at {self.settings.url}: {exc.reason}",
                                     code="planner_unavailable") from None  # fmt: skip
        if len(names) != 1:
            served = f"several models ({', '.join(names[:5])})" if names else "no model"
            raise PlannerUnavailable(f"the planner at {self.settings.url} serves {served}; name the one to ask "
                                     "(prore serve --planner-model)", code="planner_model")  # fmt: skip
        self._model = names[0]
        return self._model

    async def plan(self, domain: str, request: str, *, timeout_s: float | None = None) -> Plan:
        """The program for ``request``; :class:`PlannerUnavailable` or :class:`PlannerOutputError` otherwise.

        ``timeout_s`` caps the whole call, retries included (a stage deadline); the settings' timeout
        still bounds each HTTP call.
        """
        start = time.perf_counter()
        got = await self._greedy(domain, request, timeout_s)
        program, repairs = read_program(got.texts[0], limits=self.dsl_limits)
        return Plan(
            program, got.texts[0], repairs, got.attempts, (time.perf_counter() - start) * 1000, got.usage
        )

    async def complete(
        self, domain: str, request: str, *, timeout_s: float | None = None
    ) -> tuple[str, bool]:
        """The planner's completion for ``request``, unread (what :meth:`plan` reads a program from), and whether
        ``max_tokens`` cut it: for a caller that reads and scores completions itself, as evaluation's
        ``planner-served:`` does. Errors as :meth:`plan`'s, less :class:`PlannerOutputError`."""
        got = await self._greedy(domain, request, timeout_s)
        return got.texts[0], got.cut[0]

    async def _greedy(self, domain: str, request: str, timeout_s: float | None) -> Answer:
        """One greedy completion for ``request``, with the exemplars the card asks for: what :meth:`plan` reads
        and :meth:`complete` returns."""
        return await self._call(self.payload(domain, request, await self.shots(domain, request)), timeout_s)

    async def samples(self, domain: str, request: str, *, timeout_s: float | None = None) -> list[Plan]:
        """``guided_samples`` sampled programs for ``request`` from one call (``n``, ``guided_temperature``;
        no per-request seed, which vLLM's CPU build cannot take with ``n`` > 1); completions that are not
        programs are dropped. Errors as :meth:`plan`'s, except that no program is no error: an empty list."""
        s = self.settings
        start = time.perf_counter()
        # No per-request seed: with n > 1 it stops vLLM 0.32's CPU worker ("CPU Generator does not use offset").
        body = {
            **self.payload(domain, request, await self.shots(domain, request)),
            "n": s.guided_samples,
            "temperature": s.guided_temperature,
        }
        got = await self._call(body, timeout_s)
        plans = []
        for text in got.texts:
            try:
                program, repairs = read_program(text, limits=self.dsl_limits)
            except PlannerOutputError:
                continue
            plans.append(
                Plan(program, text, repairs, got.attempts, (time.perf_counter() - start) * 1000, got.usage)
            )
        return plans

    async def _call(self, body: dict[str, Any], timeout_s: float | None) -> Answer:
        """The completions of one chat call, through the circuit breaker, within ``timeout_s``."""
        if not self.breaker.allow():
            raise PlannerUnavailable(
                f"the planner at {self.settings.url} failed recently; the circuit breaker is open",
                code="planner_circuit_open",
            )
        try:
            if timeout_s is None:
                got = await self._ask(body)
            else:
                got = await asyncio.wait_for(self._ask(body), timeout_s)
        except TimeoutError:
            self.breaker.failure()
            raise PlannerUnavailable(
                f"the planner did not answer within {timeout_s:g} s", code="planner_timeout"
            ) from None
        except PlannerUnavailable:
            self.breaker.failure()
            raise
        except BaseException:  # cancelled (a request's deadline), or not the endpoint's fault: no verdict
            self.breaker.abandon()
            raise
        self.breaker.success()  # the endpoint answered; a bad program is the model's fault, not the endpoint's
        return got

    async def _ask(self, body: dict[str, Any]) -> Answer:
        """:meth:`_complete` with the model named (:meth:`model`)."""
        return await self._complete({**body, "model": await self.model()})

    async def _complete(self, body: dict[str, Any]) -> Answer:
        """The text of every choice of one chat call (in the order of their ``index``), the HTTP calls it
        took and its usage; the client's errors as this module's."""
        s = self.settings
        try:
            got = await self._client.achat(body)
        except OpenAITimeout:
            raise PlannerUnavailable(
                f"the planner did not answer within {s.timeout_s:g} s", code="planner_timeout"
            ) from None
        except OpenAIStatusError as exc:
            raise PlannerUnavailable(f"the planner answered HTTP {exc.status}: {exc.body[:200]}",
                                     code="planner_unavailable") from None  # fmt: skip
        except OpenAIBadResponse:
            raise PlannerUnavailable(
                "the planner's answer is not a chat completion", code="planner_bad_response"
            ) from None
        except OpenAIUnreachable as exc:
            raise PlannerUnavailable(
                f"cannot reach the planner at {s.url}: {exc.reason}", code="planner_unavailable"
            ) from None
        texts = [c.text for c in got.choices if c.text is not None]
        if not texts or len(texts) != len(got.choices):
            raise PlannerUnavailable("the planner's completion has no text", code="planner_bad_response")
        return Answer(texts, [c.finish_reason == "length" for c in got.choices], got.attempts, got.usage)

    async def ready(self) -> bool:
        """Whether the endpoint lists models now (``GET /models``); one short call, no retry."""
        try:
            await self._client.amodels(retry=NO_RETRY, timeout_s=self.settings.connect_timeout_s + 1)
        except OpenAIError:
            return False
        return True
