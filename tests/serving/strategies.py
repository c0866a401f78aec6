"""Hypothesis strategies for programs of the language, drawn from its grammar for a given corpus schema.

* :func:`generated_programs` draws valid programs together with the polarity the grammar gave each entry
  (an oracle for ``positive_entries``); :func:`programs` draws the programs alone.
* :func:`near_valid_programs` applies one mutation to a valid program: most results break one rule, some
  still pass. :func:`program_sources` draws JSON text, clean or mutated at the character level.

The execution engine's property test draws from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date

from hypothesis import strategies as st

from indexing.schema import CorpusSchema, DType, Role
from serving.dsl import DEFAULT_LIMITS, Program, Retrieval
from serving.dsl.program import MODES, ROLE_OF, corpus_modalities, placeholder_of

# A condition as SQL text and the (entry index, positive?) of each placeholder in it.
Placed = tuple[tuple[int, bool], ...]


@dataclass(frozen=True)
class Condition:
    """A boolean SQL fragment and the polarity of each placeholder occurrence in it."""

    sql: str
    placed: Placed = ()

    def negated(self) -> Condition:
        return Condition(f"NOT ({self.sql})", tuple((e, not p) for e, p in self.placed))


@dataclass(frozen=True)
class Generated:
    """A valid program and the 0-based entries the grammar placed under positive polarity."""

    program: Program
    positive_entries: tuple[int, ...]


_LITERAL_CHARS = "abcdefghijklmnopqrstuvwxyz ABC0123456789'%_-.&\\éßü☕"
_QUERY_CHARS = st.characters(codec="utf-8", categories=("L", "N", "P", "Zs"))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


string_literals = st.text(_LITERAL_CHARS, max_size=24).map(_quote)
numbers = st.one_of(
    st.integers(-50, 5000).map(str),
    st.decimals(min_value=0, max_value=1000, places=2, allow_nan=False).map(str),
)
iso_dates = st.dates(date(2000, 1, 1), date(2030, 12, 31)).map(lambda d: _quote(d.isoformat()))


def _comparison(column: str, value: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), value).map(
        lambda pair: f"{column} {pair[0]} {pair[1]}"
    )


def _structured_leaf(schema: CorpusSchema, column: str, dtype: DType) -> st.SearchStrategy[str]:
    table = schema.table
    if dtype in (DType.INT, DType.FLOAT):
        return st.one_of(
            _comparison(column, numbers),
            st.tuples(numbers, numbers).map(lambda ab: f"{column} BETWEEN {ab[0]} AND {ab[1]}"),
            st.lists(numbers, min_size=1, max_size=5).map(lambda xs: f"{column} IN ({', '.join(xs)})"),
            st.just(f"abs({column} - 10) < 5"),
            st.just(f"{column} < (SELECT avg({column}) FROM {table})"),
            st.just(f"{column} * 2 + 1 > 3"),
        )
    if dtype is DType.STRING:
        return st.one_of(
            _comparison(column, string_literals),
            string_literals.map(lambda s: f"{column} LIKE {s}"),
            string_literals.map(lambda s: f"lower({column}) ILIKE {s}"),
            st.lists(string_literals, min_size=1, max_size=4).map(
                lambda xs: f"{column} NOT IN ({', '.join(xs)})"
            ),
            string_literals.map(lambda s: f"startsWith({column}, {s})"),
            st.just(f"{column} IS NOT NULL"),
            st.just(f"length({column}) > 3"),
            st.just(f"{column} IN (SELECT {column} FROM {table} GROUP BY {column} HAVING count() > 2)"),
        )
    if dtype is DType.BOOL:
        return st.sampled_from([column, f"{column} = true", f"NOT {column}", f"{column} = false"])
    # DATE and DATETIME
    return st.one_of(
        _comparison(column, iso_dates),
        st.integers(2000, 2030).map(lambda y: f"toYear({column}) = {y}"),
        st.integers(1, 400).map(lambda n: f"{column} > today() - INTERVAL {n} DAY"),
        st.integers(0, 900).map(lambda n: f"dateDiff('day', {column}, today()) > {n}"),
        st.integers(1, 12).map(lambda m: f"toMonth({column}) = {m}"),
    )


def _structured_conditions(schema: CorpusSchema) -> st.SearchStrategy[Condition]:
    columns = [f for f in schema.fields if f.role is Role.STRUCTURED and f.name != "id"]
    return st.one_of(*[_structured_leaf(schema, f.name, f.dtype) for f in columns]).map(Condition)


@st.composite
def entries(draw: st.DrawFn, schema: CorpusSchema, max_entries: int = 4) -> tuple[Retrieval, ...]:
    """A retrieval list for ``schema``: types with fields of their role, ladders respected."""
    kinds = list(corpus_modalities(schema))
    out = []
    for _ in range(draw(st.integers(0, max_entries))):
        kind = draw(st.sampled_from(kinds))
        k = draw(st.sampled_from(DEFAULT_LIMITS.k_ladder))
        out.append(
            Retrieval(
                type=kind,
                field=draw(st.sampled_from(schema.names(ROLE_OF[kind]))),
                query=draw(st.text(_QUERY_CHARS, min_size=1, max_size=60).filter(str.strip)),
                mode=draw(st.sampled_from(MODES)),
                k=k,
                rerank=draw(st.sampled_from([r for r in DEFAULT_LIMITS.rerank_ladder if r <= k])),
            )
        )
    return tuple(out)


@st.composite
def _placeholder_condition(draw: st.DrawFn, schema: CorpusSchema, index: int, entry: Retrieval) -> Condition:
    token = placeholder_of(entry.type, index)
    negated = draw(st.booleans())
    leaf = Condition(f"id {'NOT IN' if negated else 'IN'} {token}", ((index, not negated),))
    if draw(st.integers(0, 4)) == 0:
        # The same predicate one subquery down: `id [NOT] IN (SELECT id FROM t WHERE ...)`.
        inner_not = draw(st.booleans())
        wrapped = Condition(
            f"id {'NOT IN' if inner_not else 'IN'} (SELECT id FROM {schema.table} WHERE {leaf.sql})",
            tuple((e, p != inner_not) for e, p in leaf.placed),
        )
        return wrapped
    return leaf


@st.composite
def _combined(draw: st.DrawFn, parts: list[Condition]) -> Condition:
    parts = list(parts)
    while len(parts) > 1:
        i = draw(st.integers(0, len(parts) - 2))
        left, right = parts[i], parts[i + 1]
        op = draw(st.sampled_from(["AND", "OR"]))
        both = Condition(f"({left.sql} {op} {right.sql})", left.placed + right.placed)
        parts[i : i + 2] = [both.negated() if draw(st.integers(0, 5)) == 0 else both]
    return parts[0]


@st.composite
def generated_programs(draw: st.DrawFn, schema: CorpusSchema, max_entries: int = 4) -> Generated:
    """A valid program over ``schema`` and the entries it uses positively."""
    listed = draw(entries(schema, max_entries))
    parts = [draw(_placeholder_condition(schema, i, e)) for i, e in enumerate(listed)]
    parts += draw(st.lists(_structured_conditions(schema), max_size=4))
    if listed and draw(st.integers(0, 3)) == 0:
        again = draw(st.integers(0, len(listed) - 1))
        parts.append(draw(_placeholder_condition(schema, again, listed[again])))
    parts = draw(st.permutations(parts)) if parts else parts
    sql = f"SELECT {'DISTINCT ' if draw(st.booleans()) else ''}id FROM {schema.table}"
    where = draw(_combined(parts)) if parts else Condition("TRUE")
    if parts:
        sql += f" WHERE {where.sql}"
    numeric = [
        f.name for f in schema.fields if f.dtype in (DType.INT, DType.FLOAT, DType.DATE, DType.DATETIME)
    ]
    if draw(st.booleans()):
        sql += f" ORDER BY {draw(st.sampled_from(numeric))} {draw(st.sampled_from(['ASC', 'DESC']))}"
    if draw(st.booleans()):
        sql += f" LIMIT {draw(st.integers(1, DEFAULT_LIMITS.max_limit))}"
    positive = tuple(sorted({e for e, p in where.placed if p}))
    return Generated(Program(sql, listed), positive)


def programs(schema: CorpusSchema, max_entries: int = 4) -> st.SearchStrategy[Program]:
    """Valid programs over ``schema``."""
    return generated_programs(schema, max_entries).map(lambda g: g.program)


_FRAGMENTS = [
    ";", " -- x", "/*", "；", "\u200b", "'", "(", ")", " DROP TABLE x", " system.tables", " file('x')",
    " *", "<text_9>", "<image_1>", "{p:String}", " SETTINGS readonly=0", " UNION SELECT id FROM products",
    " FORMAT JSON", "\\", "``", "\x00", "<text_0>", " id IN <text_1>", " OR ", " NOT", "$$", "[1]",
]  # fmt: skip


def _mutate_sql(program: Program, fn: Callable[[str], str]) -> Program:
    return replace(program, sql=fn(program.sql))


@st.composite
def near_valid_programs(draw: st.DrawFn, schema: CorpusSchema, max_entries: int = 4) -> Program:
    """A valid program with one mutation: a hostile fragment, a cut, a renumbered or retyped placeholder,
    an entry off its ladder or on a wrong field. The result may or may not still be valid."""
    program = draw(programs(schema, max_entries))
    sql = program.sql
    choice = draw(st.integers(0, 7))
    # Edits at word boundaries reach deeper than edits that mostly break the first keyword.
    gaps = [i for i, ch in enumerate(sql) if ch == " "] + [len(sql)]
    if choice == 0:
        at = draw(st.sampled_from(gaps))
        fragment = draw(st.sampled_from(_FRAGMENTS))
        return _mutate_sql(program, lambda s: s[:at] + fragment + s[at:])
    if choice == 1:
        a = draw(st.sampled_from(gaps))
        b = draw(st.sampled_from([g for g in gaps if g >= a]))
        return _mutate_sql(program, lambda s: s[:a] + s[b:])
    if choice == 2:
        n = draw(st.integers(0, max_entries + 2))
        return _mutate_sql(program, lambda s: s.replace("_1>", f"_{n}>", 1))
    if choice == 3:
        return _mutate_sql(
            program,
            lambda s: s.replace("<text_", "<tmp_").replace("<image_", "<text_").replace("<tmp_", "<image_"),
        )
    if choice == 4:
        return _mutate_sql(
            program,
            lambda s: s.replace(
                schema.table, draw(st.sampled_from(["system.tables", "other", "products", "emails"]))
            ),
        )
    if not program.retrieval_list:
        return program
    i = draw(st.integers(0, len(program.retrieval_list) - 1))
    entry = program.retrieval_list[i]
    if choice == 5:
        entry = replace(entry, k=draw(st.integers(-1, 60)), rerank=draw(st.integers(-1, 60)))
    elif choice == 6:
        entry = replace(entry, field=draw(st.sampled_from([*schema.columns, "nope"])))
    else:
        entry = replace(entry, query=draw(st.sampled_from(["", "   ", "x" * 300, "a\u200bb", "ok"])))
    listed = list(program.retrieval_list)
    listed[i] = entry
    return replace(program, retrieval_list=tuple(listed))


@st.composite
def program_sources(draw: st.DrawFn, schema: CorpusSchema) -> str:
    """JSON text of a program, clean or with one character-level edit (insert, delete, replace)."""
    text = draw(st.one_of(programs(schema), near_valid_programs(schema))).to_json()
    edit = draw(st.integers(0, 3))
    if edit == 0:
        return text
    at = draw(st.integers(0, len(text)))
    if edit == 1:
        return (
            text[:at]
            + draw(st.sampled_from(['"', "{", "}", "[", "]", ",", ":", "\\", "\x00", "1e999"]))
            + text[at:]
        )
    if edit == 2:
        return text[:at] + text[at + draw(st.integers(1, 5)) :]
    return text[:at] + draw(st.text(max_size=3)) + text[at + 1 :]
