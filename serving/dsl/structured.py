"""Structured output: how a planner's decoding is constrained, one definition for evaluation and serving.

Evaluation (``planner-json:PATH`` and ``planner-grammar:PATH``, :mod:`rl.eval.planner_methods`) hands vLLM's offline
engine ``StructuredOutputsParams(grammar=...)``; the served planner (``prore serve --planner-output
json|grammar``, :mod:`serving.planner`) sends the same grammar text to vLLM's OpenAI-compatible server as
the request's ``structured_outputs`` (``{"grammar": ...}``, the extra body field of vLLM 0.32's chat
completions). Both take it from :func:`constraint_grammar` with the same :data:`STRUCTURED_LIMITS`, so a
served program is decoded under exactly the constraint the planner was evaluated under.

- ``json``: :func:`program_json_grammar`, the DSL's JSON schema (:func:`serving.dsl.program_json_schema`)
  compiled by xgrammar with the separators the programs are written with (:data:`SEPARATORS`) and no other
  whitespace.
- ``grammar``: the program grammar (:func:`serving.dsl.grammar.program_grammar_ebnf`): typed SQL too.

>>> STRUCTURED_LIMITS.max_sql_chars, STRUCTURED_LIMITS.max_query_chars
(1000, 200)
>>> from indexing.schema import EMAILS
>>> constraint_grammar(EMAILS, "grammar").splitlines()[0][:24]
'root ::= prog_s | prog_s'
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence

from core.errors import MissingExtra, ProReError
from indexing.schema import CorpusSchema
from serving.dsl.grammar import program_grammar_ebnf
from serving.dsl.grounding import Grounding, value_columns
from serving.dsl.json_schema import SEPARATORS, program_json_schema
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits

CONSTRAINTS: tuple[str, ...] = ("json", "grammar", "grounded")
"""The constraints :func:`constraint_grammar` writes: the DSL's JSON schema, the program grammar, or the
program grammar grounded in one request and the corpus's column values (:mod:`serving.dsl.grounding`)."""

STRUCTURED_LIMITS = dataclasses.replace(DEFAULT_LIMITS, max_sql_chars=1000, max_query_chars=200)
"""The DSL limits the structured-output constraint quotes: 4x the longest gold SQL (286 characters) and query
(56), so that the schema's longest program (:func:`serving.dsl.longest_program_chars`, about 3,300
characters) fits the context with the prompt. Constrained decoding then always closes the program: its
budget is that length, and a byte-level token is at least one character of ASCII."""

_BOUNDED_CHAR = r"(([^\"\\\r\n]))"
"""The character rule xgrammar writes for a ``maxLength`` string: anything but ``"``, ``\\``, CR and LF."""
_PLAIN_CHAR = r"(([^\x00-\x1f\"\\]))"
"""The same rule without any control character."""


@functools.cache
def program_json_grammar(schema: CorpusSchema, limits: DslLimits = STRUCTURED_LIMITS) -> str:
    """The EBNF grammar of ``schema``'s programs for structured output: the DSL's JSON schema under
    ``limits``, compiled by xgrammar with the separators the programs are written with (``", "`` and
    ``": "``, :data:`serving.dsl.json_schema.SEPARATORS`) and no other whitespace.

    A bounded string (``maxLength``) has no escapes in xgrammar, and its character class excludes only the
    quote, the backslash, CR and LF, so a weak model could write a raw tab, which strict JSON refuses. The
    class becomes :data:`_PLAIN_CHAR` (no control character at all). A JSON-schema ``pattern`` would say the
    same, but xgrammar 0.2 fails to compile a pattern bounded past about 100 characters.

    vLLM's own JSON-schema path (``response_format`` or ``structured_outputs.json``) cannot do this: it admits
    any whitespace between tokens unless the engine is started with ``disable_any_whitespace``, which then
    forces ``","`` and ``":"``. The first lets a weak model loop on whitespace until its budget ends; the
    second forces token sequences a planner trained on ``json.dumps``' output never saw (measured: every
    completion failed validation). Compiled once per corpus and limits, not per request or batch.

    xgrammar comes with vLLM (``pip install 'proretrieval[train]'``); without it this is a
    :class:`~core.errors.MissingExtra`.
    """
    try:
        import xgrammar
    except ImportError as exc:
        raise MissingExtra("xgrammar", "train") from exc
    node = program_json_schema(schema, limits)
    grammar = str(xgrammar.Grammar.from_json_schema(node, any_whitespace=False, separators=SEPARATORS))
    plain = grammar.replace(_BOUNDED_CHAR, _PLAIN_CHAR)
    bounded = 1 + len(node["properties"]["retrieval_list"]["items"].get("anyOf", [None]))  # type: ignore[index]
    if grammar.count(_BOUNDED_CHAR) != bounded:  # pragma: no cover - a new xgrammar writes other rules
        from importlib.metadata import version

        raise ProReError(f"xgrammar {version('xgrammar')} wrote {grammar.count(_BOUNDED_CHAR)} bounded-string "
                         f"character rules, expected {bounded} (the SQL and each modality's query)",
                         code="grammar")  # fmt: skip
    return plain


def constraint_grammar(schema: CorpusSchema, constraint: str, limits: DslLimits = STRUCTURED_LIMITS, *,
                       request: str = "", values: Mapping[str, Sequence[str]] | None = None,
                       lark: bool = False) -> str:  # fmt: skip
    """The grammar that constrains a planner's decoding over ``schema``'s corpus:

    - ``json``: :func:`program_json_grammar` (EBNF that xgrammar writes and reads);
    - ``grammar``: the program grammar (:func:`serving.dsl.grammar.program_grammar_ebnf`), as EBNF that both
      xgrammar and llguidance read, or with ``lark`` in llguidance's Lark dialect (:func:`lark_grammar`:
      the same grammar, without llguidance's per-request conversion);
    - ``grounded``: the program grammar whose search phrases are spans of ``request`` and whose string
      literals are among ``values`` (:mod:`serving.dsl.grounding`), in the Lark dialect: it needs vLLM's
      ``guidance`` backend.
    """
    if constraint == "json":
        return program_json_grammar(schema, limits)
    if constraint == "grammar":
        return lark_grammar(schema, limits) if lark else program_grammar_ebnf(schema, limits)
    if constraint == "grounded":
        return lark_grammar(schema, limits, Grounding.of(request, values))
    raise ProReError(f"structured output must be one of {', '.join(CONSTRAINTS)}, got {constraint!r}",
                     code="planner_output")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _LarkTemplate:
    """The corpus grammar in llguidance's Lark dialect, with where a grounding goes: the ``QUERY`` line, and
    each string column's predicate line already rewritten to its own ``STR_<COLUMN>`` lexeme."""

    lines: tuple[str, ...]
    query_at: int | None
    preds: dict[str, tuple[int, str]]


@functools.lru_cache(maxsize=16)
def _lark_base(schema: CorpusSchema, limits: DslLimits) -> _LarkTemplate:
    from llguidance.gbnf_to_lark import gbnf_to_lark

    lines = tuple(gbnf_to_lark(program_grammar_ebnf(schema, limits)).splitlines())
    query_at = next((i for i, line in enumerate(lines) if line.startswith("QUERY:")), None)
    preds: dict[str, tuple[int, str]] = {}
    for name in value_columns(schema):
        for i, line in enumerate(lines):
            if re.match(rf'^(PRED:|\s+\|) "{re.escape(name)}" \(EQ STR ', line):
                preds[name] = (i, re.sub(r"\bSTR\b", f"STR_{name.upper()}", line))
    return _LarkTemplate(lines, query_at, preds)


def lark_grammar(schema: CorpusSchema, limits: DslLimits, grounding: Grounding | None = None) -> str:
    """The program grammar (grounded by ``grounding``) in llguidance's Lark dialect, which vLLM's
    ``guidance`` backend reads as it is.

    llguidance's own reader converts the EBNF text of :func:`serving.dsl.grammar.program_grammar_ebnf` in
    Python, about 0.4-0.8 s for a corpus's grammar: once per request, that was most of a grounded
    evaluation's time. So the ungrounded grammar is converted once per corpus and limits, with the lines a
    grounding replaces found then, and a request's grounding is written into a copy: its ``QUERY`` lexeme,
    and a ``STR_<COLUMN>`` lexeme in place of ``STR`` in the predicate of each grounded column. llguidance
    comes with vLLM; without it this is a :class:`~core.errors.MissingExtra`."""
    try:
        base = _lark_base(schema, limits)
    except ImportError as exc:
        raise MissingExtra("llguidance", "train") from exc
    if grounding is None:
        return "\n".join(base.lines) + "\n"
    query = grounding.query_rule()
    values = {name: rule for name, rule in grounding.value_rules().items() if name in value_columns(schema)}
    if (query and base.query_at is None) or any(name not in base.preds for name in values):
        from importlib.metadata import version  # pragma: no cover - a new llguidance writes other rules

        raise ProReError(f"llguidance {version('llguidance')} converted the program grammar into rules this "
                         "grounding does not know (QUERY, PRED)", code="grammar")  # fmt: skip
    out = list(base.lines)
    if query and base.query_at is not None:
        out[base.query_at] = f"QUERY: {query}"
    for name in values:
        at, line = base.preds[name]
        out[at] = line
    out += [f"STR_{name.upper()}: {rule}" for name, rule in values.items()]
    return "\n".join(out) + "\n"
