"""What sqlglot reads but ClickHouse never runs: refused at validation, each with its own code.

sqlglot's ClickHouse parser accepts more than ClickHouse does, and drops some words without a trace. A program
that passes validation and then cannot run would be scored as an execution failure (``S_e`` = 0 for a program
that broke a rule of the language), and sent to the store for nothing. So :func:`check_tokens` and
:func:`check_node` (called by :mod:`serving.dsl.safety` on every node, and again on the round trip's tree)
refuse what can be seen statically:

* ``subquery_columns``: a subquery selects exactly one column. ``id IN (SELECT id, brand FROM ...)`` is
  ClickHouse's ``NUMBER_OF_COLUMNS_DOESNT_MATCH``; a scalar subquery of two columns is a tuple, which
  compares with nothing a program can write (tuples are not allowed).
* ``call_clause``: ``ORDER BY``, ``LIMIT``, ``OFFSET`` and ``DISTINCT`` belong to a ``SELECT``; inside a
  function call ClickHouse refuses them (``lower(brand ORDER BY brand)`` is a syntax error,
  ``lower(DISTINCT brand)`` calls a ``lowerDistinct`` that does not exist), except ``DISTINCT`` as the
  argument of an aggregate (``count(DISTINCT brand)``). ``ALL`` among a call's arguments
  (``dateDiff('day', ALL release_date, today())``) is dropped by sqlglot: the program would run as
  something it did not say.
* ``number_out_of_range``: a number literal beyond Float64 (``1e400``), which ClickHouse cannot read.
* ``bad_interval``: ``INTERVAL`` takes a whole number (``INTERVAL 3 DAY``, ``INTERVAL '3' DAY``) or an
  expression, not ``INTERVAL 'x' DAY`` or ``INTERVAL 3.5 DAY``.
* ``bad_date``: a string compared with a date (a ``Date`` column, ``toDate(...)``) is written
  ``'YYYY-MM-DD'``, and with a datetime column ``'YYYY-MM-DD'`` or ``'YYYY-MM-DD hh:mm:ss'``, as the program
  grammar writes them. ClickHouse fails on ``release_date = '2024-03'`` (``CANNOT_PARSE_DATE``) or
  ``release_date = '2024-03-01 00:00:00'`` (``TYPE_MISMATCH``), and reads ``'2024-13-01'`` as some other day.
  Sampled planners write such dates often (about 0.6% of 8,192 SFT-sampled rollouts), and each one found
  only by ClickHouse cost its batch a split.

>>> from indexing.schema import PRODUCTS
>>> from serving.dsl.safety import check_sql
>>> from serving.dsl.errors import ValidationError
>>> def code(sql):
...     try:
...         check_sql(sql, PRODUCTS)
...     except ValidationError as exc:
...         return exc.code
>>> code("SELECT DISTINCT id FROM products WHERE id IN (SELECT id, brand FROM products)")
'subquery_columns'
>>> code("SELECT id FROM products WHERE dateDiff('day', ALL release_date, today()) > 1")
'call_clause'
>>> code("SELECT id FROM products WHERE id IN (SELECT id FROM products GROUP BY id HAVING count(DISTINCT brand) > 1)")
>>> code("SELECT id FROM products WHERE release_date BETWEEN '2024-01-01' AND '2024-03'")
'bad_date'
>>> code("SELECT id FROM products WHERE toDate(release_date) IN ('2024-01-01', '2024-02-29')")
"""

from __future__ import annotations

import itertools
import math
import re
from typing import NoReturn

from sqlglot import exp
from sqlglot.tokenizer_core import Token, TokenType

from indexing.schema import CorpusSchema, DType
from serving.dsl.errors import Code, ValidationError
from serving.dsl.placeholders import position_of, sentinel_of

AGGREGATES: tuple[type[exp.Func], ...] = (exp.Count, exp.Min, exp.Max, exp.Avg, exp.Sum)
"""The aggregate functions a program may call (in subqueries); only they take ``DISTINCT``."""

# Clauses of a SELECT: each belongs in its own slot of a SELECT and nowhere else.
_CLAUSES: dict[type[exp.Expr], tuple[str, str]] = {
    exp.Order: ("order", "ORDER BY"),
    exp.Limit: ("limit", "LIMIT"),
    exp.Offset: ("offset", "OFFSET"),
    exp.Distinct: ("distinct", "DISTINCT"),
    exp.Where: ("where", "WHERE"),
    exp.Group: ("group", "GROUP BY"),
    exp.Having: ("having", "HAVING"),
    exp.From: ("from_", "FROM"),
}

_WHOLE = re.compile(r"[+-]?[0-9]+")
_DAY = r"[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_DATE_FORMS: dict[DType, tuple[re.Pattern[str], str]] = {
    DType.DATE: (re.compile(_DAY), "'YYYY-MM-DD'"),
    DType.DATETIME: (
        re.compile(_DAY + r"( ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])?"),
        "'YYYY-MM-DD' or 'YYYY-MM-DD hh:mm:ss'",
    ),
}
"""How a string compared with a date or a datetime is written: the program grammar's ``date`` and ``datetime``."""
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
# Tokens after which ALL would be an argument of a call (or an item of a list): sqlglot drops it there.
_ARGUMENT_START = frozenset({TokenType.L_PAREN, TokenType.COMMA})


def _fail(message: str, code: Code, position: int | None) -> NoReturn:
    raise ValidationError(message, code=code, path="sql", position=position)


def check_tokens(tokens: list[Token]) -> None:
    """Refuse ``ALL`` among a call's arguments, which sqlglot parses and drops (it leaves no node to check)."""
    for before, tok in itertools.pairwise(tokens):
        if tok.token_type == TokenType.ALL and before.token_type in _ARGUMENT_START:
            _fail(
                "ALL is not allowed among a function's arguments (it would be dropped); write the argument alone",
                Code.CALL_CLAUSE,
                tok.start,
            )


def check_node(node: exp.Expr, schema: CorpusSchema) -> None:
    """Refuse ``node`` if ClickHouse could never run it (see the module's list); every other node passes."""
    if isinstance(node, exp.Literal) and node.is_string:
        _check_date(node, schema)
    elif type(node) in _CLAUSES:
        _check_clause(node)
    elif isinstance(node, exp.Subquery):
        select = node.this
        if isinstance(select, exp.Select) and len(select.expressions) != 1:
            _fail(
                f"a subquery selects exactly one column, not {len(select.expressions)}: "
                "write id IN (SELECT id FROM ...) or (SELECT max(price) FROM ...)",
                Code.SUBQUERY_COLUMNS,
                position_of(node),
            )
    elif isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = float(node.this)
        except ValueError:
            return  # not a decimal number; ClickHouse's own parser judges it
        if math.isinf(value):
            _fail(
                f"the number {node.this[:40]} is beyond what ClickHouse reads (about 1.8e308)",
                Code.NUMBER_OUT_OF_RANGE,
                position_of(node),
            )
    elif isinstance(node, exp.Interval):
        _check_interval(node)


def _temporal(node: exp.Expr | None, schema: CorpusSchema) -> DType | None:
    """``DATE`` or ``DATETIME`` when ``node`` reads as one (a column of that type, ``toDate(...)``), else None."""
    if isinstance(node, exp.Column) and sentinel_of(node) is None and schema.has(node.name):
        dtype = schema.field(node.name).dtype
        return dtype if dtype in _DATE_FORMS else None
    if isinstance(node, exp.Anonymous) and node.name.lower() == "todate":
        return DType.DATE
    return None


def _check_date(node: exp.Literal, schema: CorpusSchema) -> None:
    """Refuse a string compared with a date or a datetime that is not written as the grammar writes one."""
    parent, other = node.parent, None
    if isinstance(parent, _COMPARISONS):
        other = parent.this if node.arg_key == "expression" else parent.expression
    elif (isinstance(parent, exp.Between) and node.arg_key in ("low", "high")) or (
        isinstance(parent, exp.In) and node.arg_key == "expressions"
    ):
        other = parent.this
    kind = _temporal(other, schema)
    if kind is None:
        return
    pattern, form = _DATE_FORMS[kind]
    if not pattern.fullmatch(node.this):
        _fail(
            f"a {kind.value} is written {form}, not {node.sql(dialect='clickhouse')[:40]}",
            Code.BAD_DATE,
            position_of(node),
        )


def _check_clause(node: exp.Expr) -> None:
    slot, label = _CLAUSES[type(node)]
    parent = node.parent
    if isinstance(parent, exp.Select) and node.arg_key == slot:
        return
    if isinstance(node, exp.Distinct) and isinstance(parent, AGGREGATES) and node.arg_key == "this":
        return  # count(DISTINCT brand)
    call = parent
    while call is not None and not isinstance(call, exp.Func | exp.Select):
        call = call.parent
    if isinstance(call, exp.Func):
        name = call.name if isinstance(call, exp.Anonymous) else call.sql_name()
        only = "; only aggregates take DISTINCT" if isinstance(node, exp.Distinct) else ""
        _fail(f"{label} is not allowed inside {name}(...){only}", Code.CALL_CLAUSE, position_of(node))
    _fail(f"{label} is allowed only as a clause of a SELECT", Code.FORBIDDEN_CLAUSE, position_of(node))


def _check_interval(node: exp.Interval) -> None:
    value, unit = node.this, node.args.get("unit")
    if unit is None:
        _fail("INTERVAL takes a unit: INTERVAL 3 DAY", Code.BAD_INTERVAL, position_of(node))
    if isinstance(value, exp.Literal) and not _WHOLE.fullmatch(value.this):
        _fail(
            f"INTERVAL takes a whole number, not {value.sql(dialect='clickhouse')[:40]}: INTERVAL 3 DAY",
            Code.BAD_INTERVAL,
            position_of(node),
        )
