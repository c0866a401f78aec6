"""Filter pushdown: the structured conditions that guard a placeholder, as a Milvus boolean expression.

A placeholder ``id IN <p>`` can matter for a document only where its *guards* hold: the other
conjuncts of every ``AND`` on the way from the placeholder up to the outer ``WHERE``. Where a guard is
false its ``AND`` is false whatever the id set holds, so nothing above it depends on the placeholder
(also under ``NOT`` and ``OR``: a constant operand stays constant). So any id set ``S'`` that agrees
with the searched set ``S`` on the documents where the guards hold gives the same rows; the search's
top-K *among those documents*, which Milvus returns when it is given the guards as its ``filter``,
is such a set once K reaches them all, and at a smaller K it holds every guarded document of ``S``
and more. That is the whole pass: :func:`pushdown_filters` finds each entry's guards in the planned
tree and translates them, once, with :func:`to_milvus`.

**Positive entries only.** The argument holds for every placeholder, but at a fixed K only a
positive one (``id IN``, under an even number of ``NOT``) is better for it: its guarded candidates can
only grow, so the program's rows can only grow. A negative entry's K says how much it excludes; filtered,
its top-K reaches further down the ranking among the guarded documents and excludes more, up to rows
the request wanted. Measured on the demo benchmarks (``bench/planning.py``), pushing into negative
entries too left 1.7% (test) to 8% (OOD) of the gold programs with no row at all; so an entry with a
negative use gets no filter (``negative=True`` pushes into those too).

**The rows are the same; the order can differ.** Unfiltered, a positive list ranks every row it
holds, including rows the program reaches another way (``id IN <p> OR brand != 'x'``, or a ``NOT``
over an ``AND``, which De Morgan makes an ``OR``). Filtered, it holds only the rows its guards let
through, so such a row scores 0 under the ranking contract and comes after the ranked rows, by id.
Where every path to the placeholder is a chain of ``AND`` from the outer ``WHERE``, every result row
satisfies the guards and one list's order is unchanged.

Where guards come from, exactly:

* Only ``AND`` siblings on the path count; an ``OR`` sibling never does (in
  ``a OR (b AND id IN <p>)`` the placeholder gets ``b``, not ``a``), and a conjunct that itself holds a
  placeholder or a subquery is never translated.
* The path may cross ``id [NOT] IN (SELECT id FROM <table> WHERE ...)`` when that subquery is a plain
  filter on the corpus table (:func:`~serving.engine.plan.is_plain_filter`): the id is the table's
  key, so the inner row is the outer row. Above any other subquery (``LIMIT``, ``GROUP BY``, ...) the
  outer guards stop: there a document's membership can change which *other* rows the subquery keeps.
* A guard below a ``NOT`` that reads a nullable column is dropped: with NULL the ``AND`` is not
  constant in three-valued logic.
* An entry used by several placeholders gets only the guards common to all its uses.
* Guards are translated one conjunct at a time; one that cannot be translated exactly is simply not
  pushed (the others still are). A translated ``OR`` or ``NOT`` is translated whole or not at all.

What translates (:func:`to_milvus`): comparisons (``= != < <= > >=``), ``IN`` lists, ``BETWEEN``,
``AND`` / ``OR`` / ``NOT`` of those, between a scalar column of the schema (mirrored in every
collection, see :mod:`indexing.stores.milvus`) and a literal. Strings compare only by (in)equality
and ``IN`` (ordering is left to ClickHouse's collation), and are written between double quotes with
``\\``, ``"``, newline, tab and carriage return escaped; a string holding any other control character
is not pushed (Milvus Lite and the Milvus server disagree on escapes beyond those). Numbers must fit
the column (an integer column compared with a fraction is not pushed). Dates and datetimes become the
mirror's epoch seconds: literals ``'YYYY-MM-DD'``, ``'YYYY-MM-DD hh:mm:ss'`` (datetimes),
``toDate('...')``, ``toDateTime('...', 'UTC')`` (what :func:`~serving.engine.plan.pin_clock` writes),
plus or minus a fixed-length ``INTERVAL`` (second to week); ``toYear(col)`` / ``YEAR(col)`` and
``toDate(col)`` comparisons become ranges of the column. Anything else (``LIKE``, functions,
arithmetic on columns, column to column) is not pushed.

>>> import sqlglot
>>> from indexing.schema import PRODUCTS
>>> tree = sqlglot.parse_one(
...     "SELECT id FROM products WHERE price < 200 AND brand IN ('Sony', 'Bose') AND title LIKE '%x%' "
...     "AND (color = 'red' OR id IN text_1) AND id NOT IN text_2", read="clickhouse")
>>> pushdown_filters(tree, PRODUCTS)
{0: 'brand in ["Sony", "Bose"] and price < 200.0'}
>>> pushdown_filters(tree, PRODUCTS, negative=True)[1]
'brand in ["Sony", "Bose"] and price < 200.0'
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from indexing.schema import CorpusSchema, DType, Role
from serving.dsl.placeholders import placeholder_sites
from serving.engine.climb import climb

__all__ = ["conjoin", "id_at_most", "id_filter", "pushdown_filters", "to_milvus"]

_INT64 = (-(2**63), 2**63 - 1)
_EXACT_FLOAT_INT = 2**53
"""Integers beyond this are not all doubles; compared with a float column they are not pushed."""

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_YEARS = (1970, 2105)
"""Years a ``toYear`` comparison is pushed for: ClickHouse's DateTime covers 1970 to 2106."""
_DATE_RANGE = (dt.date(1970, 1, 1), dt.date(2149, 6, 6))
"""ClickHouse's ``Date`` range; a literal outside it is not pushed."""
_INTERVAL_S = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86_400, "WEEK": 7 * 86_400}
"""Interval units of fixed length in UTC (months and years are calendar arithmetic: not pushed)."""
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_OPS: dict[type[exp.Expr], str] = {
    exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}  # fmt: skip
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

Value = str | int | float | bool | dt.date | dt.datetime


# -- guards ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Guard:
    node: exp.Expr
    under_not: bool


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The operands of ``node`` read as a chain of ``AND`` (parentheses removed)."""
    node = _unparen(node)
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _guards_of(predicate: exp.In, table: str) -> list[_Guard]:
    """The guards of one placeholder predicate (see the module docstring), innermost first."""
    out: list[_Guard] = []
    steps, _ = climb(predicate, table)
    for node in steps:
        parent = node.parent
        if isinstance(parent, exp.And):
            sibling = parent.expression if node is parent.this else parent.this
            out += [_Guard(c, False) for c in conjuncts(sibling)]
        elif isinstance(parent, exp.Not):
            out = [_Guard(g.node, True) for g in out]
    return out


def _reads(node: exp.Expr, columns: frozenset[str]) -> bool:
    return any(c.name in columns for c in node.find_all(exp.Column))


def pushdown_filters(
    tree: exp.Select,
    schema: CorpusSchema,
    nullable: frozenset[str] | None = None,
    *,
    negative: bool = False,
) -> dict[int, str]:
    """The Milvus filter of each entry (0-based) that has translatable guards in ``tree``.

    ``tree`` is a planned program's tree (placeholders as sentinel columns); ``nullable`` defaults to
    the schema's nullable columns. Only entries whose every use is positive get a filter unless
    ``negative`` is set (see the module docstring). Entries without a pushable guard are absent.
    Pure: the tree is not changed.
    """
    nullable = schema.nullable_fields if nullable is None else nullable
    per_entry: dict[int, list[str]] = {}
    excluded: set[int] = set()
    for predicate, use in placeholder_sites(tree):
        if not (use.positive or negative):
            excluded.add(use.entry)
        exprs: list[str] = []
        for guard in _guards_of(predicate, schema.table):
            if guard.under_not and _reads(guard.node, nullable):
                continue
            text = to_milvus(guard.node, schema)
            if text is not None and text not in exprs:
                exprs.append(text)
        if use.entry in per_entry:
            mine = set(exprs)
            per_entry[use.entry] = [e for e in per_entry[use.entry] if e in mine]
        else:
            per_entry[use.entry] = exprs
    # Conjuncts in sorted order: two entries with the same guards get the same filter, whatever the nesting
    # they were collected through (a chain's next entry then drops the filter its candidates already passed,
    # :func:`serving.engine.conditional.condition`), and the filter is one cache key.
    return {
        entry: _and(sorted(exprs))
        for entry, exprs in sorted(per_entry.items())
        if exprs and entry not in excluded
    }


# -- translation -----------------------------------------------------------------------------


def to_milvus(node: exp.Expr, schema: CorpusSchema) -> str | None:
    """``node`` as an equivalent Milvus boolean expression over the mirrored scalars, or None.

    >>> import sqlglot
    >>> from indexing.schema import EMAILS
    >>> where = lambda s: sqlglot.parse_one("SELECT id FROM emails WHERE " + s, read="clickhouse").args["where"].this
    >>> print(to_milvus(where("toYear(date) = 2023 AND NOT folder IN ('spam', 'Levi''s')"), EMAILS))
    (date >= 1672531200 and date < 1704067200) and not (folder in ["spam", "Levi's"])
    >>> to_milvus(where("sender LIKE '%x%'"), EMAILS) is None
    True
    """
    node = _unparen(node)
    if isinstance(node, exp.And):
        parts = [to_milvus(c, schema) for c in conjuncts(node)]
        return None if any(p is None for p in parts) else " and ".join(_group(p) for p in parts if p)
    if isinstance(node, exp.Or):
        left, right = to_milvus(node.this, schema), to_milvus(node.expression, schema)
        return None if left is None or right is None else f"{_group(left)} or {_group(right)}"
    if isinstance(node, exp.Not):
        inner = to_milvus(node.this, schema)
        return None if inner is None else f"not ({inner})"
    if type(node) in _OPS:
        return _comparison(node, schema)
    if isinstance(node, exp.Between):
        return _between(node, schema)
    if isinstance(node, exp.In):
        return _in(node, schema)
    return None


def _group(text: str) -> str:
    return f"({text})" if " and " in text or " or " in text else text


def conjoin(*exprs: str | None) -> str | None:
    """The Milvus ``and`` of the expressions given (None and empty ones left out), or None for none.

    >>> conjoin("price < 9.0 or rating > 4.0", None, 'id in ["P1"]')
    '(price < 9.0 or rating > 4.0) and id in ["P1"]'
    """
    return _and([e for e in exprs if e]) or None


def _and(exprs: Sequence[str]) -> str:
    return " and ".join(_group(e) for e in exprs)


def id_filter(ids: Iterable[str]) -> str | None:
    """A Milvus expression that holds for the documents ``ids`` (the collections' VARCHAR primary key
    ``id``, :mod:`indexing.stores.milvus`), or None when no id can be written.

    Ids are written as :func:`to_milvus` writes strings; an id holding a control character other than
    newline, tab and carriage return cannot be (Milvus Lite and the server escape it differently) and is
    left out, so the expression never holds for a document outside ``ids``.

    >>> print(id_filter(["P00001", 'say "hi"', "bell\x07"]))
    id in ["P00001", "say \\"hi\\""]
    """
    written = [text for text in map(_string, ids) if text is not None]
    return f"id in [{', '.join(written)}]" if written else None


def id_at_most(bound: str) -> str | None:
    """A Milvus expression that holds for the documents whose id sorts at or before ``bound`` (ids are
    compared as strings, code point by code point, as the ranking contract orders ties), or None when
    ``bound`` cannot be written (:func:`id_filter`).

    >>> id_at_most("P00042")
    'id <= "P00042"'
    """
    written = _string(bound)
    return None if written is None else f"id <= {written}"


@dataclass(frozen=True)
class _Target:
    """What a comparison's non-literal side reads: a column, maybe through ``toYear`` / ``toDate``."""

    column: str
    dtype: DType
    transform: str | None  # None, "year" or "date"


def _target(node: exp.Expr, schema: CorpusSchema) -> _Target | None:
    node = _unparen(node)
    transform = None
    if isinstance(node, exp.Year) or _call(node, "toYear", 1):
        transform, node = "year", _unparen(_arg(node))
    elif _call(node, "toDate", 1):
        transform, node = "date", _unparen(_arg(node))
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return None
    ident = node.this
    if not isinstance(ident, exp.Identifier) or node.table not in ("", schema.table):
        return None
    name = ident.name
    if not schema.has(name) or schema.field(name).role is not Role.STRUCTURED:
        return None
    dtype = schema.field(name).dtype
    if transform == "year" and dtype not in (DType.DATE, DType.DATETIME):
        return None
    if transform == "date":
        if dtype is DType.DATE:
            transform = None  # toDate of a date is the date
        elif dtype is not DType.DATETIME:
            return None
    return _Target(name, dtype, transform)


def _call(node: exp.Expr, name: str, arity: int) -> bool:
    return isinstance(node, exp.Anonymous) and node.this == name and len(node.expressions) == arity


def _arg(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous):
        first: exp.Expr = node.expressions[0]
        return first
    this: exp.Expr = node.this
    return this


def _value(node: exp.Expr) -> Value | None:
    """The constant ``node`` denotes, when it is one this pass can read exactly."""
    node = _unparen(node)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        text = node.this
        if not isinstance(text, str):
            return None
        if node.is_string:
            return text
        return _number(text)
    if isinstance(node, exp.Neg):
        inner = _value(node.this)
        if isinstance(inner, bool) or not isinstance(inner, int | float):
            return None
        return -inner
    if _call(node, "toDate", 1):
        arg = _value(node.expressions[0])
        return _parse_date(arg) if isinstance(arg, str) else None
    if _call(node, "toDateTime", 2):
        first, zone = _value(node.expressions[0]), _value(node.expressions[1])
        if not isinstance(zone, str):
            return None
        if isinstance(first, dt.datetime):
            return first  # the same instant, shown in another zone
        if isinstance(first, str) and zone == "UTC":
            return _parse_datetime(first)
        return None
    if isinstance(node, exp.Add | exp.Sub):
        return _shifted(node)
    return None


def _number(text: str) -> int | float | None:
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[0-9]*\.?[0-9]*([eE][-+]?[0-9]+)?", text) and any(ch.isdigit() for ch in text):
        value = float(text)
        return value if math.isfinite(value) else None
    return None


def _parse_date(text: str) -> dt.date | None:
    if not _DATE.fullmatch(text):
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        return None
    return day if _DATE_RANGE[0] <= day <= _DATE_RANGE[1] else None


def _parse_datetime(text: str) -> dt.datetime | None:
    day = _parse_date(text) if _DATE.fullmatch(text) else None
    if day is not None:
        return dt.datetime(day.year, day.month, day.day)
    if not _DATETIME.fullmatch(text):
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.year >= _YEARS[0] else None


def _shifted(node: exp.Add | exp.Sub) -> Value | None:
    base, interval = _value(node.this), node.expression
    if not isinstance(interval, exp.Interval) or not isinstance(base, dt.date):
        return None
    unit = interval.args.get("unit")
    unit_name = unit.name.upper() if isinstance(unit, exp.Var) else None
    amount = _value(interval.this)
    if isinstance(amount, str) and re.fullmatch(r"[0-9]+", amount):
        amount = int(amount)
    if unit_name not in _INTERVAL_S or isinstance(amount, bool) or not isinstance(amount, int):
        return None
    seconds = _INTERVAL_S[unit_name] * amount * (1 if isinstance(node, exp.Add) else -1)
    if isinstance(base, dt.datetime):
        return base + dt.timedelta(seconds=seconds)
    if seconds % 86_400:
        return None  # a date plus hours is a datetime in the server's zone
    return base + dt.timedelta(days=seconds // 86_400)


def _epoch(value: dt.date) -> int:
    moment = value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)
    return int(moment.replace(tzinfo=dt.UTC).timestamp())


def _string(value: str) -> str | None:
    if any((ord(ch) < 0x20 and ch not in _ESCAPES) or ord(ch) == 0x7F for ch in value):
        return None
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def _scalar(value: Value, dtype: DType) -> str | None:
    """``value`` as a Milvus literal for a plain column of ``dtype``, or None when not exact."""
    if dtype is DType.STRING:
        return _string(value) if isinstance(value, str) else None
    if dtype is DType.BOOL:
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return "true" if value else "false"
        return None
    if isinstance(value, bool):
        return None
    if dtype is DType.INT:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value) if isinstance(value, int) and _INT64[0] <= value <= _INT64[1] else None
    if dtype is DType.FLOAT:
        if isinstance(value, int) and abs(value) <= _EXACT_FLOAT_INT:
            return repr(float(value))
        return repr(value) if isinstance(value, float) else None
    if dtype is DType.DATE:
        if isinstance(value, str):
            value = _parse_date(value)  # type: ignore[assignment]
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            return None  # a date against a datetime converts in the server's zone
        return str(_epoch(value))
    if dtype is DType.DATETIME:
        if isinstance(value, str):
            value = _parse_datetime(value)  # type: ignore[assignment]
        return str(_epoch(value)) if isinstance(value, dt.datetime) else None
    return None


def _range(target: _Target, value: Value) -> tuple[int, int] | None:
    """``[lo, hi)`` in epoch seconds of the column for one year or one day of a transformed target."""
    if target.transform == "year":
        if isinstance(value, bool) or not isinstance(value, int) or not _YEARS[0] <= value <= _YEARS[1]:
            return None
        return _epoch(dt.date(value, 1, 1)), _epoch(dt.date(value + 1, 1, 1))
    day = _parse_date(value) if isinstance(value, str) else value
    if isinstance(day, dt.datetime) or not isinstance(day, dt.date):
        return None
    return _epoch(day), _epoch(day + dt.timedelta(days=1))


def _compare(target: _Target, op: str, value: Value) -> str | None:
    col = target.column
    if target.transform is None:
        if target.dtype in (DType.STRING, DType.BOOL) and op not in ("==", "!="):
            return None
        literal = _scalar(value, target.dtype)
        return None if literal is None else f"{col} {op} {literal}"
    span = _range(target, value)
    if span is None:
        return None
    lo, hi = span
    return {
        "==": f"{col} >= {lo} and {col} < {hi}",
        "!=": f"not ({col} >= {lo} and {col} < {hi})",
        "<": f"{col} < {lo}",
        "<=": f"{col} < {hi}",
        ">": f"{col} >= {hi}",
        ">=": f"{col} >= {lo}",
    }[op]


def _comparison(node: exp.Expr, schema: CorpusSchema) -> str | None:
    op = _OPS[type(node)]
    left, right = node.args.get("this"), node.args.get("expression")
    if left is None or right is None:
        return None
    target = _target(left, schema)
    if target is None:
        target, op = _target(right, schema), _FLIP[op]
        value = _value(left)
    else:
        value = _value(right)
    if target is None or value is None:
        return None
    return _compare(target, op, value)


def _between(node: exp.Between, schema: CorpusSchema) -> str | None:
    target = _target(node.this, schema)
    low, high = node.args.get("low"), node.args.get("high")
    if target is None or low is None or high is None or node.args.get("symmetric"):
        return None
    lo, hi = _value(low), _value(high)
    if lo is None or hi is None:
        return None
    first, second = _compare(target, ">=", lo), _compare(target, "<=", hi)
    if first is None or second is None:
        return None
    return f"{_group(first)} and {_group(second)}"


def _in(node: exp.In, schema: CorpusSchema) -> str | None:
    target = _target(node.this, schema)
    items: Sequence[exp.Expr] = node.expressions
    if target is None or not items or any(node.args.get(k) for k in ("query", "field", "unnest")):
        return None
    values = [_value(i) for i in items]
    if any(v is None for v in values):
        return None
    if target.transform is not None:
        parts = [_compare(target, "==", v) for v in values if v is not None]
        return None if any(p is None for p in parts) else " or ".join(_group(p) for p in parts if p)
    literals = [_scalar(v, target.dtype) for v in values if v is not None]
    if any(lit is None for lit in literals) or target.dtype is DType.BOOL:
        return None
    return f"{target.column} in [{', '.join(lit for lit in literals if lit)}]"
