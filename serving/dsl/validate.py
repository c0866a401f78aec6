"""Validation: a typed :class:`Program` against a corpus schema, giving a :class:`ValidatedProgram`.

The SQL passes :func:`serving.dsl.safety.check_sql`; each entry names a field of its modality with a bounded
query and RPL settings on their ladders; each placeholder sits in ``id [NOT] IN <p>``, names an existing entry
of its own type, and every entry is used.

>>> from indexing.schema import PRODUCTS
>>> from serving.dsl.parse import parse_program
>>> v = validate(parse_program('''{"sql": "SELECT id FROM products WHERE price<200 AND id NOT IN <image_2> AND id IN <text_1>",
...   "retrieval_list": [{"type": "text", "field": "review", "query": "quiet"},
...                      {"type": "image", "field": "image", "query": "white"}]}'''), PRODUCTS)
>>> v.normalized_sql
'SELECT id FROM products WHERE price < 200 AND NOT (id IN <image_2>) AND id IN <text_1>'
>>> v.positive_entries
(0,)
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from typing import NoReturn

from sqlglot import exp
from sqlglot.expressions.core import POSITION_META_KEYS  # where a node's token was, in its meta

from indexing.schema import CorpusSchema
from serving.dsl.errors import Code, ValidationError
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.placeholders import PlaceholderUse, placeholder_sites, restore_placeholders, sentinel_of
from serving.dsl.program import Program, Retrieval, placeholder_of
from serving.dsl.safety import check_sql
from serving.dsl.shape import ENTRY, PROGRAM, Scope, check_attributes

_DIALECT = "clickhouse"


@dataclass(frozen=True)
class ValidatedProgram:
    """A program that passed validation, with what the engine and the benchmarks need from it.

    ``tree`` holds placeholders as sentinel columns; passes copy it and never change it in place.
    ``placeholders`` lists every occurrence in SQL order; ``positive_entries`` are the 0-based entry indexes
    with at least one positive occurrence (see :mod:`serving.dsl.placeholders` for the polarity rule): the
    ranking contract of DESIGN.md section 3 sums over exactly these.
    """

    program: Program
    table: str
    tree: exp.Select
    placeholders: tuple[PlaceholderUse, ...]
    normalized_sql: str
    has_order_by: bool
    positive_entries: tuple[int, ...]

    @property
    def retrieval_list(self) -> tuple[Retrieval, ...]:
        """The program's entries; entry ``i`` is named by placeholder number ``i + 1``."""
        return self.program.retrieval_list

    def normalized_program(self) -> Program:
        """The program with its SQL in canonical form (for golden files, caches and display)."""
        return Program(sql=self.normalized_sql, retrieval_list=self.program.retrieval_list)


def _invalid(message: str, code: Code, path: str) -> NoReturn:
    raise ValidationError(message, code=code, path=path)


def _check_typed(program: Program) -> None:
    # A Program built in code rather than parsed may still hold values its types forbid; the parser's checks.
    check_attributes(program, PROGRAM, "")
    for i, entry in enumerate(program.retrieval_list):
        check_attributes(entry, ENTRY, f"retrieval_list[{i}]")


def _check_entry(entry: Retrieval, index: int, schema: CorpusSchema, limits: DslLimits) -> None:
    path = f"retrieval_list[{index}]"
    scope = Scope(limits, schema, entry.type)  # what the declared shape allows this entry (serving.dsl.shape)
    fields = ENTRY.choices("field", scope)
    listed = ", ".join(map(str, fields)) or "none"
    if not schema.has(entry.field):
        _invalid(
            f"no field {entry.field!r} in {schema.table}; {entry.type} fields: {listed}",
            Code.UNKNOWN_FIELD,
            f"{path}.field",
        )
    if entry.field not in fields:
        _invalid(
            f"field {entry.field!r} is {schema.field(entry.field).role.value}; {entry.type} entries search "
            f"one of: {listed}",
            Code.BAD_FIELD,
            f"{path}.field",
        )
    query = entry.query
    if not query.strip():
        _invalid("query is empty", Code.EMPTY_QUERY, f"{path}.query")
    if len(query) > limits.max_query_chars:
        _invalid(
            f"query has {len(query)} characters; at most {limits.max_query_chars}",
            Code.QUERY_TOO_LONG,
            f"{path}.query",
        )
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in query):
        _invalid("query holds control or invisible characters", Code.BAD_QUERY, f"{path}.query")
    widths, depths = ENTRY.choices("k", scope), ENTRY.choices("rerank", scope)
    if entry.k not in widths:
        _invalid(f"k must be one of {widths}, not {entry.k}", Code.BAD_K, f"{path}.k")
    if entry.rerank not in depths:
        _invalid(
            f"rerank must be one of {depths}, not {entry.rerank}",
            Code.BAD_RERANK,
            f"{path}.rerank",
        )
    if entry.rerank > entry.k:
        _invalid(f"rerank {entry.rerank} exceeds k {entry.k}", Code.RERANK_EXCEEDS_K, f"{path}.rerank")


def _check_uses(uses: list[PlaceholderUse], entries: tuple[Retrieval, ...]) -> None:
    for use in uses:
        written = placeholder_of(use.modality, use.entry)
        if not 0 <= use.entry < len(entries):
            raise ValidationError(
                f"{written} names entry {use.entry + 1}, but retrieval_list has {len(entries)}",
                code=Code.PLACEHOLDER_OUT_OF_RANGE,
                path="sql",
                position=use.position,
            )
        entry = entries[use.entry]
        if entry.type != use.modality:
            raise ValidationError(
                f"{written} names entry {use.entry + 1}, whose type is {entry.type}; write {placeholder_of(entry.type, use.entry)}",
                code=Code.PLACEHOLDER_TYPE_MISMATCH,
                path="sql",
                position=use.position,
            )
    used = {use.entry for use in uses}
    for i in range(len(entries)):
        if i not in used:
            _invalid(
                f"entry {i + 1} is never used; add `id IN {placeholder_of(entries[i].type, i)}` or drop it",
                Code.UNUSED_ENTRY,
                f"retrieval_list[{i}]",
            )


CHECKED_CACHE_SIZE = 4096
"""How many accepted SQL texts validation remembers (per schema and limits)."""


@functools.lru_cache(maxsize=CHECKED_CACHE_SIZE)
def _checked_sql(
    sql: str, schema: CorpusSchema, limits: DslLimits
) -> tuple[exp.Select, tuple[PlaceholderUse, ...], str]:
    """What validation derives from the SQL text alone: the checked tree, its placeholder uses and the
    normalized SQL, remembered per accepted text (sampled programs repeat their SQL with other phrases, and
    a check costs milliseconds of sqlglot). The tree is shared; every pass after validation works on a
    copy. Refusals are not remembered here; the engine keeps its own record of refused programs."""
    tree, _ = check_sql(sql, schema, limits)
    uses = tuple(use for _, use in placeholder_sites(tree))
    normalized = restore_placeholders(tree).sql(dialect=_DIALECT, comments=False, copy=False)  # a fresh copy
    _drop_positions(tree)
    return tree, uses, normalized


def _drop_positions(tree: exp.Expr) -> None:
    """Forget the token positions of every node but the placeholders' (their order is the order of the
    uses, :func:`~serving.dsl.placeholders.placeholder_sites`). Positions serve only error messages, which
    validation has given by now, yet every copy of the tree deep-copies them one dict at a time, and the
    engine's passes copy a program's tree several times: a copy costs about a third without them. Other
    ``meta`` keys (a function's name as written, which rendering uses) are kept."""
    keep: set[int] = set()
    for column in tree.find_all(exp.Column):
        if sentinel_of(column) is not None:
            keep.update(id(node) for node in column.walk())
    for node in tree.walk():
        meta = node._meta  # None when sqlglot recorded nothing; reading ``meta`` would create a dict
        if not meta or id(node) in keep:
            continue
        for key in POSITION_META_KEYS:
            meta.pop(key, None)
        if not meta:
            node._meta = None


def validate(program: Program, schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS) -> ValidatedProgram:
    """Check ``program`` against ``schema`` and the language's rules; raise a :class:`DslError` if it breaks one."""
    _check_typed(program)
    tree, uses, normalized = _checked_sql(program.sql, schema, limits)
    entries = program.retrieval_list
    if len(entries) > limits.max_entries:
        _invalid(
            f"retrieval_list has {len(entries)} entries; at most {limits.max_entries}",
            Code.TOO_MANY_ENTRIES,
            "retrieval_list",
        )
    for i, entry in enumerate(entries):
        _check_entry(entry, i, schema, limits)
    _check_uses(list(uses), entries)
    return ValidatedProgram(
        program=program,
        table=schema.table,
        tree=tree,
        placeholders=uses,
        normalized_sql=normalized,
        has_order_by=tree.args.get("order") is not None,
        positive_entries=tuple(sorted({use.entry for use in uses if use.positive})),
    )
