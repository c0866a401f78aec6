"""The grammar of a corpus's programs for constrained decoding: EBNF in the dialect xgrammar compiles
(vLLM's ``structured_outputs.grammar``), written from the corpus schema and the DSL limits.

The JSON schema (:func:`serving.dsl.program_json_schema`) shapes the JSON and leaves the SQL a bounded
string, so a weak planner can still write SQL that fails validation. This grammar shapes the SQL too, in the
form the benchmarks' gold programs take (:mod:`rl.datasets.compile`):

- ``SELECT DISTINCT id FROM <table> WHERE <condition>``, where the condition is ``AND``, ``OR``,
  ``NOT (...)`` and parentheses over predicates and placeholders;
- each predicate tests one structured column with operators and literals of its type: strings with
  ``=``, ``!=`` and ``[NOT] IN (...)``; numbers and dates with comparisons, ``BETWEEN`` and ``IN``;
  booleans with ``= true|false``; dates also through ``toYear``, datetimes through ``toDate`` and ``toYear``;
- placeholders (``id IN <text_1>``, ``id NOT IN <image_2>``) are numbered in the order they appear, each
  once, and the retrieval list then holds exactly one entry per placeholder, of its modality, in that
  order. This is a cross-constraint between the SQL and the list, which a context-free grammar can only
  carry as state: every condition rule is indexed by how many placeholders were written before it and
  the modalities of those it writes (``or_0_sti``: none before, a text then an image one within), up to
  :func:`grammar_entries` entries;
- entries search a field of their modality, with a non-blank query free of control characters, a mode,
  ``k`` on the ladder and ``rerank`` no wider than ``k``.

So a completion the grammar admits parses, and passes validation short of the size caps (depth, nodes,
literal and list lengths the grammar bounds loosely). The JSON is written as the programs are (``", "`` and
``": "``, no other whitespace).

>>> from indexing.schema import EMAILS
>>> text = program_grammar_ebnf(EMAILS)
>>> text.splitlines()[0]
'root ::= prog_s | prog_st | prog_stt | prog_sttt | prog_stttt | prog_sttttt | prog_stttttt | prog_sttttttt | prog_stttttttt'
"""

from __future__ import annotations

import functools
import itertools
import json

from indexing.schema import CorpusSchema, DType, Role
from serving.dsl.grounding import Grounding
from serving.dsl.json_schema import SEPARATORS
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.program import MODES, ROLE_OF, corpus_modalities, placeholder_of

MAX_STATES = 64
"""Most placeholder states (sequences of modalities) the grammar enumerates; :func:`grammar_entries` lowers
the entry cap of a corpus with several modalities to stay within it (2 modalities: 5 entries, 63 states)."""
_CMP = ("=", "!=", "<", "<=", ">", ">=")
_EQ = ("=", "!=")


def _lit(text: str) -> str:
    """``text`` as an EBNF string literal."""
    return json.dumps(text)


def _alt(options: list[str]) -> str:
    return " | ".join(options)


def grammar_entries(schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS) -> int:
    """The most entries a program of the grammar holds: the limit's, lowered until the sequences of the
    corpus's modalities up to that length number at most :data:`MAX_STATES`."""
    m = len(corpus_modalities(schema))
    n = limits.max_entries
    while n > 1 and sum(m**j for j in range(n + 1)) > MAX_STATES:
        n -= 1
    return n


def _states(schema: CorpusSchema, entries: int) -> list[str]:
    """Every sequence of modality initials up to ``entries`` long, shortest first."""
    initials = [m[0] for m in corpus_modalities(schema)]
    return ["".join(p) for n in range(entries + 1) for p in itertools.product(initials, repeat=n)]


def _predicates(schema: CorpusSchema, limits: DslLimits, grounding: Grounding | None = None) -> list[str]:
    """The rules of the structured predicates, by column type; a column ``grounding`` holds values of takes
    only those literals (``str_<column>``)."""
    values = grounding.value_rules() if grounding else {}
    lists = f"{{0, {limits.max_in_list - 1}}}"
    rules = [
        f'str ::= "\'" str_char{{0, {limits.max_literal_chars}}} "\'"',
        "str_char ::= [^'\\x00-\\x1f\"\\\\] | \"''\"",
        'int ::= "-"? [0-9]{1, 18}',
        'num ::= int ("." [0-9]{1, 10})?',
        'bool ::= "true" | "false"',
        'date ::= "\'" date_body "\'"',
        'date_body ::= [12] [0-9] [0-9] [0-9] "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
        'datetime ::= "\'" date_body (" " ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9])? "\'"',
        f"cmp ::= {_alt([_lit(f' {op} ') for op in _CMP])}",
        f"eq ::= {_alt([_lit(f' {op} ') for op in _EQ])}",
        'in ::= " IN (" | " NOT IN ("',
    ]
    ordered = f'cmp @ | " BETWEEN " @ " AND " @ | in @ (", " @){lists} ")"'
    by_type = {
        DType.STRING: f'eq str | in str (", " str){lists} ")"',
        DType.INT: ordered.replace("@", "int"),
        DType.FLOAT: ordered.replace("@", "num"),
        DType.BOOL: "eq bool",
        DType.DATE: ordered.replace("@", "date"),
        DType.DATETIME: ordered.replace("@", "datetime"),
    }
    preds = []
    for f in schema.fields:
        if f.role is Role.STRUCTURED:
            if f.dtype is DType.STRING and f.name in values:
                rules.append(f"str_{f.name} ::= {values[f.name]}")
                preds.append(f"{_lit(f.name)} ({by_type[f.dtype].replace('str', f'str_{f.name}')})")
                continue
            preds.append(f"{_lit(f.name)} ({by_type[f.dtype]})")
            if f.dtype in (DType.DATE, DType.DATETIME):
                preds.append(f'"toYear({f.name})" ({by_type[DType.INT]})')
            if f.dtype is DType.DATETIME:
                preds.append(f'"toDate({f.name})" ({by_type[DType.DATE]})')
    rules.append(f"pred ::= {_alt(preds)}")
    return rules


def _key(name: str, first: bool = False) -> str:
    """The JSON text before a value: ``, "name": `` (no comma for the first key)."""
    return ("" if first else SEPARATORS[0]) + json.dumps(name) + SEPARATORS[1]


def _entries(schema: CorpusSchema, limits: DslLimits, grounding: Grounding | None = None) -> list[str]:
    """The rules of one retrieval entry per modality (``entry_t``, ``entry_i``); with ``grounding``, a query
    is one of its spans."""
    reach = [f"{_lit(_key('k') + str(k))} rerank_{k}?" for k in limits.k_ladder]
    free = f'"\\"" [^\\x00-\\x20"\\\\] [^\\x00-\\x1f"\\\\]{{0, {limits.max_query_chars - 1}}} "\\""'
    rules = [
        f"query ::= {(grounding and grounding.query_rule()) or free}",
        f"mode ::= {_alt([_lit(json.dumps(m)) for m in MODES])}",
        f"reach ::= {_alt(reach)} | rerank_{limits.default_k}?",
    ]
    for k in sorted({*limits.k_ladder, limits.default_k}):
        narrower = _alt([_lit(str(r)) for r in limits.rerank_ladder if r <= k])
        rules.append(f"rerank_{k} ::= {_lit(_key('rerank'))} ({narrower})")
    for m in corpus_modalities(schema):
        fields = _alt([_lit(json.dumps(name)) for name in schema.names(ROLE_OF[m])])
        opening = "{" + _key("type", first=True) + json.dumps(m) + _key("field")
        rules.append(f"entry_{m[0]} ::= {_lit(opening)} ({fields}) {_lit(_key('query'))} query "
                     f"({_lit(_key('mode'))} mode)? reach \"}}\"")  # fmt: skip
    return rules


def _condition(schema: CorpusSchema, states: list[str]) -> list[str]:
    """The condition rules. A condition between the placeholder states ``a`` and ``b`` (``a`` a prefix of
    ``b``) writes the placeholders ``b[len(a):]``, numbered from ``len(a) + 1``; what ``a`` holds is never read
    again, so a rule is indexed by that offset and those modalities alone (``or_2_sti``: two placeholders
    written before it, a text then an image one within it). Indexed by the pair instead, ecommerce's grammar
    held 2.7x the rules for the same language, and llguidance compiled it per request in 70 ms."""
    name = {m[0]: m for m in corpus_modalities(schema)}
    rules = []
    longest = len(states[-1])  # shortest first
    for at, seq in ((at, seq) for at in range(longest + 1) for seq in states if at + len(seq) <= longest):
        rules.append(
            f"or_{at}_s{seq} ::= and_{at}_s{seq} | "
            + _alt([f'and_{at}_s{seq[:j]} " OR " or_{at + j}_s{seq[j:]}' for j in range(len(seq) + 1)])
        )
        rules.append(
            f"and_{at}_s{seq} ::= un_{at}_s{seq} | "
            + _alt([f'un_{at}_s{seq[:j]} " AND " and_{at + j}_s{seq[j:]}' for j in range(len(seq) + 1)])
        )
        unary = [f'"NOT (" or_{at}_s{seq} ")"', f'"(" or_{at}_s{seq} ")"']
        if not seq:
            unary.append("pred")
        elif len(seq) == 1:
            ph = placeholder_of(name[seq], at)
            unary.append(f'"id IN {ph}" | "id NOT IN {ph}"')
        rules.append(f"un_{at}_s{seq} ::= {_alt(unary)}")
    return rules


@functools.lru_cache(maxsize=256)
def program_grammar_ebnf(schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS,
                         grounding: Grounding | None = None) -> str:  # fmt: skip
    """The grammar of ``schema``'s programs under ``limits`` (module docstring), as EBNF text; with
    ``grounding`` (:mod:`serving.dsl.grounding`), search phrases and string literals are narrowed to it."""
    states = _states(schema, grammar_entries(schema, limits))
    sep = SEPARATORS[0]
    head = _lit("{" + _key("sql", first=True) + f'"SELECT DISTINCT id FROM {schema.table} WHERE ')
    middle = _lit('"' + _key("retrieval_list") + "[")
    lines = [f"root ::= {_alt([f'prog_s{s}' for s in states])}"]
    for s in states:
        entries = [f"entry_{c}" for c in s]
        body = " ".join([head, f"or_0_s{s}", middle, f" {_lit(sep)} ".join(entries), '"]}"'] if entries else
                        [head, f"or_0_s{s}", middle, '"]}"'])  # fmt: skip
        lines.append(f"prog_s{s} ::= {body}")
    rules = [*lines, *_condition(schema, states), *_predicates(schema, limits, grounding),
             *_entries(schema, limits, grounding)]  # fmt: skip
    return "\n".join(rules) + "\n"
