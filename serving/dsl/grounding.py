"""Grounded decoding: the program grammar narrowed to one request and one corpus.

A small planner trained from scratch learns to copy a request's phrase into its search entry for the
wording it was trained on; on wording it never saw it writes a phrase it memorized instead (an OOD request
"an alloy lamp arm" got the query "auto-start"), and the program runs and finds nothing relevant. The same
happens to values: a request's "sony" must become the literal ``'Sony'`` the column holds.

So this grammar constrains, per request, the two places where a program names something of the world:

- **a search phrase** (``"query"`` of an entry) must be a contiguous span of the request's words, as the
  request wrote it or lowercased. The engine's vector (or BM25) search then supplies the meaning: the
  planner decides *what* to search, never invents *words* to search with (a copy mechanism, as in pointer
  networks, enforced at decoding time instead of learned);
- **a string literal** of a structured column (``brand = '...'``) must be one of the column's distinct values
  in the corpus, what a deployment reads off its own table (never the benchmark generator's phrase book). A
  column with more values than :data:`MAX_VALUES` keeps the free string rule.

Everything else is the program grammar's (:func:`serving.dsl.grammar.program_grammar_ebnf`): a completion
still parses and validates. The grammar text differs per request, so it suits a backend that compiles
lazily (llguidance, vLLM's ``guidance`` backend) rather than one that compiles the whole grammar up front.

>>> g = Grounding.of("Sony headphones, noise cancelling", {"brand": ("Sony", "Bose")})
>>> g.spans[:3]
('Sony', 'sony', 'Sony headphones')
>>> "noise cancelling" in g.spans, "headphones, noise" in g.spans
(True, True)
>>> g.values
(('brand', ("'Bose'", "'Sony'")),)
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from indexing.schema import CorpusSchema, DType, Role

MAX_SPAN_WORDS = 12
"""Longest search phrase, in words, a grounded entry may copy (the gold programs' longest is 9)."""
MAX_VALUES = 2000
"""Most distinct values a column may have for its literals to be grounded; more (ids, free text) keeps the
free string rule."""

_WORD = re.compile(r"\S+")
_EDGE = "\"'`.,;:!?()[]{}<>*"
"""Punctuation stripped from a span's ends (inner punctuation stays: "headphones, noise")."""


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclasses.dataclass(frozen=True)
class Grounding:
    """What one request's grammar may name: the request's spans, and each string column's values (as SQL
    literals). Hashable, so the grammar text of a (schema, grounding) pair is built once."""

    spans: tuple[str, ...]
    values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, request: str, values: Mapping[str, Sequence[str]] | None = None,
           *, max_words: int = MAX_SPAN_WORDS) -> Grounding:  # fmt: skip
        """The grounding of ``request``: its word spans up to ``max_words`` long (each also lowercased),
        and the columns of ``values`` with at most :data:`MAX_VALUES` values each."""
        words = [(m.start(), m.end()) for m in _WORD.finditer(request)]
        spans: dict[str, None] = {}
        for i in range(len(words)):
            for j in range(i, min(len(words), i + max_words)):
                text = request[words[i][0] : words[j][1]].strip(_EDGE).strip()
                # A search phrase is plain text: control characters and quotes cannot be a query.
                if text and not any(c in text for c in '"\\') and text.isprintable():
                    spans.setdefault(text)
                    spans.setdefault(text.lower())
        cols = tuple(
            (name, tuple(_sql_literal(v) for v in sorted(set(vals)) if v and v.isprintable()))
            for name, vals in sorted((values or {}).items())
            if 0 < len(vals) <= MAX_VALUES
        )
        return cls(tuple(spans), tuple((n, v) for n, v in cols if v))

    def value_rules(self) -> dict[str, str]:
        """The EBNF rule of each grounded column's literal, by column (``str_brand ::= "'Bose'" | ...``)."""
        return {name: " | ".join(json.dumps(v) for v in lits) for name, lits in self.values}

    def query_rule(self) -> str | None:
        """The EBNF body of a grounded search phrase (the JSON string of one span), or None without spans."""
        if not self.spans:
            return None
        return '"\\"" (' + " | ".join(json.dumps(json.dumps(s)[1:-1]) for s in self.spans) + ') "\\""'


def value_columns(schema: CorpusSchema) -> tuple[str, ...]:
    """The structured string columns whose values can be named in a request (all but the key)."""
    return tuple(
        f.name
        for f in schema.fields
        if f.role is Role.STRUCTURED and f.dtype is DType.STRING and f.name != "id"
    )


def read_column_values(
    index: Any, schema: CorpusSchema, limit: int = MAX_VALUES
) -> dict[str, tuple[str, ...]]:
    """The distinct non-blank values of ``schema``'s string columns, read from ``index``'s SQL table
    (``index.sql.query``), sorted; a column with more than ``limit`` values is left out."""
    values: dict[str, tuple[str, ...]] = {}
    for name in value_columns(schema):
        # Column and table names come from the schema and the index, never from a request.
        rows = index.sql.query(f"SELECT DISTINCT `{name}` FROM {index.table} LIMIT {limit + 1}")
        found = tuple(sorted(str(r[0]) for r in rows if r[0] is not None and str(r[0]).strip()))
        if len(found) <= limit:
            values[name] = found
    return values
