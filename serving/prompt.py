"""The one prompt that asks a model for a program: the corpus schema and the rules of the language.

Local training, verl's parquet, the served planner (:mod:`serving.planner`) and the few-shot baseline all
build their chat messages here (training code reads them through :mod:`rl.prompt`, which re-exports this
module), so a model sees the same words at training and at serving time.

A prompt is a system message (what the corpus holds and how a program is written) followed by optional
demonstrations and the user's request. Four profiles say how much of the language the system message spells out:

- ``full``: every field with its role, type, description and example values; every rule of DSL v1
  (DESIGN.md section 3), the RPL extensions (``mode``, ``k``, ``rerank``), the functions the SQL may call and
  the ranking contract; one example program. Meant for instruction-tuned models (Qwen3-4B/8B) with a long context.
- ``short``: one line per field (name, type, role, at most two example values) and the rules without which a
  program cannot validate; no RPL extensions, no function list. Meant for the small models trained from scratch
  on one machine, whose context and capacity are small. A program written under ``short`` is still a full DSL
  program; it just leaves the RPL fields at their defaults.
- ``compact``: one sentence naming the table and its fields by role, and nothing else. Meant for models trained
  from scratch, which learn the language from the training programs alone: for them the system message is the
  same words on every row of a domain, and under ``short`` it is about 70% of every training chat's tokens.
- ``request``: no system message; the user message is the request prefixed by its corpus (``email: unread mail
  from Ann``, :func:`request_text`). What an encoder-decoder planner reads (:mod:`serving.seq2seq`): its encoder
  is pretrained on sentences, and the corpus is the one thing of the schema it must be told.

A trained model's directory carries its **planner card**, ``planner.json`` (:data:`CARD`), which names the
profile it was trained with; evaluation (``planner:PATH``) and serving (``prore serve --planner-card``, the
KServe transformer's ``--planner_card``) read it with :func:`card_profile`, so nobody has to repeat the
profile by hand. A checkpoint without a card (a pretrained model, a verl run) gets ``full``.

Example values come from the vocabulary the corpora are generated from (:mod:`indexing.corpora.vocab`), so
the prompt is the same on every machine and needs no store.

>>> msgs = messages("ecommerce", "wireless headphones under $200", profile="short")
>>> [m["role"] for m in msgs]
['system', 'user']
>>> msgs[1]["content"]
'wireless headphones under $200'
>>> "- price: float, structured (SQL)" in msgs[0]["content"]
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from core.errors import ProReError
from indexing.corpora.vocab import email_vocab, product_vocab
from indexing.schema import CorpusSchema, DType, Role, schema_for
from serving.dsl import DEFAULT_LIMITS, DslLimits

Profile = Literal["full", "short", "compact", "request"]
PROFILES: tuple[Profile, ...] = get_args(Profile)
"""The prompt profiles; see the module docstring."""

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": ...}``."""

EXAMPLE_PROGRAMS: Mapping[str, str] = {
    "ecommerce": json.dumps(
        {
            "sql": "SELECT id FROM products WHERE category = 'headphones' AND price < 200 "
            "AND id IN <text_1> AND id NOT IN <image_2>",
            "retrieval_list": [
                {"type": "text", "field": "review", "query": "great noise cancelling"},
                {"type": "image", "field": "image", "query": "white over-ear headphones"},
            ],
        }
    ),
    "email": json.dumps(
        {
            "sql": "SELECT id FROM emails WHERE folder = 'inbox' AND has_attachment "
            "AND date >= '2024-03-01 00:00:00' AND id IN <text_1>",
            "retrieval_list": [{"type": "text", "field": "body", "query": "signed contract for the renewal"}],
        }
    ),
}
"""One valid program per corpus, shown in the system message (tests validate each against its schema)."""

_ROLE_WORDS = {
    Role.STRUCTURED: "structured (SQL)",
    Role.TEXT: "text (searched by a text entry)",
    Role.IMAGE: "image (searched by an image entry)",
}

_TYPE_EXAMPLES: Mapping[DType, tuple[str, ...]] = {
    DType.BOOL: ("true", "false"),
    DType.DATE: ("'2024-03-15'",),
    DType.DATETIME: ("'2024-03-15 09:30:00'",),
}
"""Example literals for fields whose values the vocabulary does not list: how the SQL writes that type."""


@dataclass(frozen=True)
class PromptConfig:
    """How a prompt is built; the defaults are what verl's parquet and the served planner use."""

    profile: Profile = "full"
    """``full``, ``short``, ``compact`` or ``request`` (see the module docstring)."""
    max_examples: int = 4
    """Example values shown per field under ``full``; ``short`` shows at most two."""
    limits: DslLimits = field(default_factory=lambda: DEFAULT_LIMITS)
    """The ladders the rules quote (``k``, ``rerank``, the number of entries)."""

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise PromptError(unknown_profile(self.profile), code="prompt_profile")
        if self.max_examples < 0:
            raise PromptError(
                f"max_examples must be at least 0, got {self.max_examples}", code="prompt_examples"
            )


def unknown_profile(got: object) -> str:
    """The message of every refusal of a profile name.

    >>> unknown_profile("tiny")
    "unknown prompt profile 'tiny'; choose one of full, short, compact, request"
    """
    return f"unknown prompt profile {got!r}; choose one of {', '.join(PROFILES)}"


class PromptError(ProReError):
    """A prompt cannot be built as asked (unknown profile, bad option)."""

    code = "prompt"


def _quoted(values: Sequence[str]) -> tuple[str, ...]:
    return tuple("'" + v.replace("'", "''") + "'" for v in values)


@cache
def example_values(domain: str) -> Mapping[str, tuple[str, ...]]:
    """SQL literals a field of ``domain`` takes, from the generating vocabulary, most common kinds first.

    >>> example_values("ecommerce")["category"][:2]
    ("'headphones'", "'speakers'")
    >>> example_values("email")["is_read"]
    ('true', 'false')
    """
    schema = schema_for(domain)
    out: dict[str, tuple[str, ...]] = {}
    if domain == "ecommerce":
        pv = product_vocab()
        out["brand"] = _quoted(list(pv.brands))
        out["category"] = _quoted(list(pv.categories))
        out["color"] = _quoted(list(pv.colors))
        out["price"] = ("19.99", "249.0")
        out["rating"] = ("4.5", "3.0")
        out["review_count"] = ("12", "850")
    else:
        ev = email_vocab()
        out["sender"] = _quoted([p.address for p in ev.people[:: max(1, len(ev.people) // 8)]])
        out["sender_domain"] = _quoted(list(dict.fromkeys(p.domain for p in ev.people)))
        out["recipient"] = _quoted([p.address for p in ev.owners])
        out["folder"] = _quoted(list(ev.folders))
    for f in schema.fields:
        if f.role is Role.STRUCTURED and f.name not in out and f.dtype in _TYPE_EXAMPLES:
            out[f.name] = _TYPE_EXAMPLES[f.dtype]
    return out


def _field_lines(schema: CorpusSchema, cfg: PromptConfig) -> list[str]:
    values = example_values(schema.domain)
    n = cfg.max_examples if cfg.profile == "full" else min(2, cfg.max_examples)
    lines = []
    for f in schema.fields:
        line = f"- {f.name}: {f.dtype.value}, {_ROLE_WORDS[f.role]}"
        if cfg.profile == "full":
            line += f". {f.doc}"
        shown = values.get(f.name, ())[:n]
        if shown:
            line += (
                f" Examples: {', '.join(shown)}." if cfg.profile == "full" else f"; e.g. {', '.join(shown)}"
            )
        lines.append(line)
    return lines


def _core_rules(schema: CorpusSchema, limits: DslLimits) -> list[str]:
    types = ("text", "image") if schema.image_fields else ("text",)
    fields = " or ".join(types)
    marks = " and ".join(f"<{t}_k>" for t in types)
    return [
        'Answer with one JSON object and nothing else: {"sql": "...", "retrieval_list": [...]}.',
        f"sql is one SELECT id FROM {schema.table} ... in the ClickHouse dialect; it may filter only on the "
        "structured fields. Quote strings with single quotes; write dates as quoted strings.",
        f'Each retrieval_list entry is {{"type": "{" | ".join(types)}", "field": <a {fields} field>, '
        '"query": <a short phrase>}; its type is the role of its field.',
        f"{marks} {'names' if len(types) == 1 else 'name'} entry k of retrieval_list, counting from 1 over the whole list, "
        "and may appear only as id IN <...> or id NOT IN <...>. Every entry is used; a placeholder's type is "
        "its entry's type.",
        f"At most {limits.max_entries} entries. Use an entry for what only the {fields} says "
        "(qualities, looks, topics); use SQL for exact values.",
    ]


def _full_rules(schema: CorpusSchema, limits: DslLimits) -> list[str]:
    ladder = ", ".join(map(str, limits.k_ladder))
    reranks = ", ".join(map(str, limits.rerank_ladder))
    return [
        "SQL may use AND, OR, NOT, comparisons, IN, BETWEEN, LIKE and ILIKE, arithmetic, date functions "
        f"(toDate, toYear, toMonth, addDays, subtractDays, dateDiff, today, now) and nested SELECTs from {schema.table}; "
        "ORDER BY and LIMIT are allowed. No JOIN, UNION, WITH, comments, SETTINGS or second statement.",
        f'Optional entry fields: "mode" is dense (default), sparse (BM25) or fuse (both, reciprocal-rank fused); '
        f'"k" is how many ids the entry keeps, one of {ladder} (default {limits.default_k}); '
        f'"rerank" is one of {reranks} (0: no reranking) and at most k.',
        "Ranking: with ORDER BY, its order wins; otherwise results are ranked by the sum over the entries under "
        f"id IN of 1/({limits.rrf_constant} + rank of the id in that entry), ties broken by id.",
    ]


def _compact(schema: CorpusSchema) -> str:
    """``compact``: the table and its fields by role, in one line.

    >>> print(_compact(schema_for("email")))  # doctest: +ELLIPSIS
    Write a retrieval program over emails. Structured fields: id, sender, ...; text fields: subject, body.
    """
    groups = [("Structured", Role.STRUCTURED), ("text", Role.TEXT), ("image", Role.IMAGE)]
    names = [(label, [f.name for f in schema.fields if f.role is role]) for label, role in groups]
    fields = "; ".join(f"{label} fields: {', '.join(n)}" for label, n in names if n)
    return f"Write a retrieval program over {schema.table}. {fields}."


def request_text(domain: str, request: str) -> str:
    """The user message of the ``request`` profile: the corpus, then the request (one planner serves both).

    >>> request_text("email", "unread mail from Ann")
    'email: unread mail from Ann'
    """
    return f"{domain}: {request}"


def system_prompt(domain: str, config: PromptConfig | None = None) -> str:
    """The system message for requests over the corpus of ``domain`` (``ecommerce`` or ``email``); the
    ``request`` profile has none."""
    cfg = config or PromptConfig()
    schema = schema_for(domain)
    if cfg.profile == "request":
        raise PromptError("the request profile has no system message", code="prompt_profile")
    if cfg.profile == "compact":
        return _compact(schema)
    rules = _core_rules(schema, cfg.limits)
    if cfg.profile == "full":
        rules += _full_rules(schema, cfg.limits)
    head = (
        f"You write retrieval programs over the {schema.table} table. Turn the user's request into a program "
        "whose first result is the one document the request describes."
    )
    parts = [
        head,
        f"Fields of {schema.table} (id is the key):",
        *_field_lines(schema, cfg),
        "Rules:",
        *(f"{i}. {r}" for i, r in enumerate(rules, 1)),
        f"Example: {EXAMPLE_PROGRAMS[domain]}",
    ]
    return "\n".join(parts)


def messages(
    domain: str,
    request: str,
    *,
    profile: Profile = "full",
    shots: Sequence[tuple[str, str]] = (),
    config: PromptConfig | None = None,
) -> list[Message]:
    """Chat messages asking for the program of ``request``: system, then ``shots`` as user/assistant pairs
    of (request, program JSON), then the request. ``config`` wins over ``profile`` when both are given."""
    cfg = config or PromptConfig(profile=profile)
    if cfg.profile == "request":
        out: list[Message] = []
        asked = [(request_text(domain, nl), program) for nl, program in shots]
        request = request_text(domain, request)
    else:
        out, asked = [{"role": "system", "content": system_prompt(domain, cfg)}], list(shots)
    for nl, program in asked:
        out += [{"role": "user", "content": nl}, {"role": "assistant", "content": program}]
    out.append({"role": "user", "content": request})
    return out


CARD = "planner.json"
"""The planner card's file name, beside the model's weights: ``{"profile": ..., "domains": [...], ...}``."""

CARDLESS_PROFILE: Profile = "full"
"""The profile of a checkpoint without a card: one not trained by the local trainer (a pretrained model,
a verl run), which reads the full prompt."""


class PlannerCardError(ProReError):
    """A planner card that cannot be read, or names no known profile."""

    code = "planner_card"


def read_card(path: str | Path) -> dict[str, Any]:
    """The planner card of the model directory ``path`` (or the card file itself).

    A directory without a card gets ``{"profile": "full"}`` (:data:`CARDLESS_PROFILE`); a path that does not
    exist, a card that is not a JSON object or one naming an unknown profile raises :class:`PlannerCardError`.
    """
    p = Path(path)
    file = p / CARD if p.is_dir() else p
    if p.is_dir() and not file.is_file():
        return {"profile": CARDLESS_PROFILE}
    if not file.is_file():
        raise PlannerCardError(f"no planner card or model directory at {p}")
    try:
        card = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlannerCardError(f"{file}: not a readable planner card ({exc})") from exc
    if not isinstance(card, dict) or card.get("profile") not in PROFILES:
        got = card.get("profile") if isinstance(card, dict) else card
        raise PlannerCardError(f"{file}: {unknown_profile(got)}")
    return card


def card_profile(path: str | Path) -> Profile:
    """The prompt profile the planner at ``path`` (model directory or card) was trained with; a planner that is
    no decoder-only chat model (its card names an ``arch``, as the MiniLM encoder-decoder's does) reads the
    ``request`` profile's chat, whatever profile its card names."""
    card = read_card(path)
    if card.get("arch") is not None:
        return "request"
    profile: Profile = card["profile"]
    return profile


def planner_profile(profile: str | None = None, card: str | Path | None = None) -> Profile:
    """The profile a served planner gets: ``profile`` when given, else its card's, else :data:`CARDLESS_PROFILE`.

    >>> planner_profile("compact"), planner_profile()
    ('compact', 'full')
    """
    if profile is not None and card is not None:
        raise PlannerCardError("give the planner's prompt profile or its card, not both")
    if card is not None:
        return card_profile(card)
    if profile is None:
        return CARDLESS_PROFILE
    if profile not in PROFILES:
        raise PlannerCardError(unknown_profile(profile))
    got: Profile = profile  # type: ignore[assignment]
    return got
