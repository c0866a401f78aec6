"""SQL safety: one read-only SELECT over the corpus table, every node on an allow-list (DESIGN.md section 6).

The checks run from cheap to expensive, and each refuses with a typed code and an offset in the SQL (the
first two stages and the parse are :mod:`serving.dsl.lexical`'s):

1. text: length cap; no control, format or private-use characters anywhere; outside string literals only
   printable ASCII (homoglyph keywords, fullwidth semicolons and zero-width spaces stop here);
2. tokens (sqlglot's ClickHouse tokenizer): the statement starts with SELECT; no comments (sqlglot would
   re-emit them, and a comment is where a second statement hides); no ``;``; no query parameters, arrays,
   heredocs or other string forms; no INTO / SETTINGS / FORMAT; literal length and parenthesis depth capped;
3. the tree (sqlglot, dialect ``clickhouse``): exactly one statement whose root is a SELECT; node count and
   depth capped; every node's class on the allow-list, functions on the allow-list by class or, for
   functions sqlglot does not model (``Anonymous``), by exact ClickHouse name.

Decisions: no UNION / INTERSECT / EXCEPT, no JOIN, no WITH (so no CTE can shadow the corpus table), no table
aliases, no derived tables in FROM; ``OR`` / ``NOT`` and ``id IN (SELECT id FROM <table> ...)`` express the
same sets. The outer SELECT projects only ``id`` (optionally DISTINCT); GROUP BY, HAVING and aggregates are
for subqueries. Columns may be qualified only with the corpus table's name.

>>> from indexing.schema import PRODUCTS
>>> tree, sites = check_sql("SELECT id FROM products WHERE brand = 'Levi''s' AND id IN <text_1>", PRODUCTS)
>>> tree.sql(dialect="clickhouse")
"SELECT id FROM products WHERE brand = 'Levi''s' AND id IN text_1"
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NoReturn

import sqlglot
from sqlglot import exp

from indexing.schema import CorpusSchema, DType
from serving.dsl import runnable
from serving.dsl.errors import Code, ValidationError
from serving.dsl.lexical import DIALECT, check_operands, check_text_and_tokens, fail, parse
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.placeholders import (
    SENTINEL,
    PlaceholderToken,
    mark_placeholders,
    placeholder_position,
    position_of,
    sentinel_of,
)

# Expression classes a program may use, beyond functions; each is checked further below where it needs it.
_STRUCTURE = (
    exp.Select, exp.From, exp.Table, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered,
    exp.Limit, exp.Offset, exp.Distinct, exp.Subquery, exp.Column, exp.Identifier, exp.Literal,
    exp.Boolean, exp.Null, exp.Paren, exp.Neg, exp.Not, exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT,
    exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike, exp.Is, exp.Add, exp.Sub,
    exp.Mul, exp.Div, exp.Mod, exp.Interval, exp.Var, exp.Star, exp.DataType,
)  # fmt: skip

ALLOWED_FUNCTIONS: tuple[type[exp.Func], ...] = (
    # conditionals
    exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least, exp.Cast,
    # strings
    exp.Lower, exp.Upper, exp.Length, exp.StrPosition, exp.StartsWith, exp.EndsWith, exp.Substring, exp.Concat,
    # numbers
    exp.Abs, exp.Round, exp.Floor, exp.Ceil,
    # dates
    exp.DateDiff, exp.DateAdd, exp.DateSub, exp.TimestampTrunc, exp.DateTrunc, exp.DayOfWeekIso,
    exp.Year, exp.Month, exp.Day, exp.Extract,
    # aggregates (subqueries only)
    exp.Count, exp.Min, exp.Max, exp.Avg, exp.Sum,
)  # fmt: skip
"""Function classes sqlglot models that a program may call."""

_ALLOWED_CLASSES: frozenset[type[exp.Expr]] = frozenset((*_STRUCTURE, *ALLOWED_FUNCTIONS))
_AGGREGATES = runnable.AGGREGATES

ALLOWED_ANONYMOUS: frozenset[str] = frozenset(
    {
        "toDate", "toDateTime", "toYear", "toMonth", "toDayOfMonth", "toDayOfWeek", "toDayOfYear", "toQuarter",
        "toHour", "toStartOfWeek", "toYYYYMM", "now", "today", "yesterday",
        "addDays", "addWeeks", "addMonths", "addYears", "subtractDays", "subtractWeeks", "subtractMonths",
        "subtractYears", "lowerUTF8", "upperUTF8", "lengthUTF8", "positionCaseInsensitive", "empty", "notEmpty",
        "toString", "toInt64", "toFloat64",
    }
)  # fmt: skip
"""ClickHouse functions sqlglot does not model (``Anonymous``) that a program may call, by exact name."""

_UNITS = frozenset({"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND"})
_CAST_TYPES = frozenset(
    {
        exp.DataType.Type.DATE, exp.DataType.Type.DATE32, exp.DataType.Type.DATETIME,
        exp.DataType.Type.DATETIME64, exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR,
        exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT,
        exp.DataType.Type.UINT, exp.DataType.Type.UBIGINT, exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE,
        exp.DataType.Type.BOOLEAN,
    }
)  # fmt: skip

# Argument slots whose node sqlglot renders from its text (``unit_to_var`` prints ``unit.name`` unquoted):
# only a bare unit word of the known list may fill them.
_UNIT_SLOTS = ("unit",)
# Optional argument slots of allowed functions that no program needs; a filled one is refused. ``format``
# (CAST ... FORMAT), ``to`` (FLOOR(x TO unit)) and ``zone`` are rendered from a literal's text by some
# dialects' generators; ``safe`` / ``action`` / ``default`` change CAST's meaning.
_EMPTY_SLOTS: dict[type[exp.Expr], tuple[str, ...]] = {
    exp.Cast: ("format", "safe", "action", "default"),
    exp.Floor: ("to",),
    exp.Ceil: ("to",),
    exp.DateDiff: ("zone",),
    exp.TimestampTrunc: ("zone",),
    exp.DateTrunc: ("zone",),
    exp.Interval: ("fraction_in_string",),
}

_SELECT_ARGS = frozenset(
    {"expressions", "distinct", "from_", "where", "group", "having", "order", "limit", "offset"}
)
_SELECT_ARG_CODES = {
    "with_": Code.WITH_CLAUSE,
    "joins": Code.JOIN,
    "laterals": Code.JOIN,
    "settings": Code.SETTINGS_CLAUSE,
    "format": Code.FORMAT_CLAUSE,
    "into": Code.INTO_CLAUSE,
}

_SELECT_ARG_LABELS = {
    "with_": "WITH",
    "joins": "JOIN",
    "laterals": "LATERAL",
    "into": "INTO",
    "sort": "SORT BY",
}


def _fail_at(message: str, code: Code, node: exp.Expr) -> NoReturn:
    fail(message, code, position_of(node))


def _check_size(tree: exp.Expr, limits: DslLimits) -> None:
    count = 0
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.max_nodes:
            _fail_at(f"the SQL has more than {limits.max_nodes} syntax nodes", Code.TOO_MANY_NODES, node)
        if depth > limits.max_depth:
            _fail_at(f"the SQL nests deeper than {limits.max_depth} levels", Code.TOO_DEEP, node)
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _int_literal(node: exp.Expr | None) -> int | None:
    # The length bound keeps int() off long digit strings.
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit() and len(node.this) <= 18:
        return int(node.this)
    return None


def _check_select(select: exp.Select, schema: CorpusSchema, outer: bool, limits: DslLimits) -> None:
    for key, value in select.args.items():
        if value is None or value == [] or value is False or key in _SELECT_ARGS:
            continue
        code = _SELECT_ARG_CODES.get(key, Code.FORBIDDEN_CLAUSE)
        label = _SELECT_ARG_LABELS.get(key, key.rstrip("_").upper())
        _fail_at(f"{label} is not allowed in a program", code, select)
    if outer and (select.args.get("group") or select.args.get("having")):
        _fail_at("GROUP BY and HAVING belong in subqueries", Code.FORBIDDEN_CLAUSE, select)
    distinct = select.args.get("distinct")
    if isinstance(distinct, exp.Distinct) and distinct.args.get("on"):
        _fail_at("DISTINCT ON is not allowed", Code.FORBIDDEN_CLAUSE, distinct)
    source = select.args.get("from_")
    if not isinstance(source, exp.From):
        _fail_at("every SELECT reads FROM the corpus table", Code.MISSING_FROM, select)
    table = source.this
    if isinstance(table, exp.Subquery):
        _fail_at(f"FROM reads {schema.table} itself, not a subquery", Code.DERIVED_TABLE, table)
    if not isinstance(table, exp.Table):
        what = "FINAL" if isinstance(table, exp.Final) else type(table).__name__
        _fail_at(
            f"FROM reads {schema.table} and nothing else; {what} is not allowed",
            Code.FORBIDDEN_CLAUSE,
            select,
        )
    _check_table(table, schema)
    projections = select.expressions
    if any(isinstance(p, exp.Star) or isinstance(p.this, exp.Star) for p in projections):
        _fail_at("'*' is not allowed; the outer SELECT projects id", Code.STAR, select)
    if outer and (
        len(projections) != 1 or not isinstance(projections[0], exp.Column) or projections[0].name != "id"
    ):
        _fail_at(
            "the outer SELECT projects only id: SELECT [DISTINCT] id FROM ...", Code.BAD_PROJECTION, select
        )
    for key in ("limit", "offset"):
        clause = select.args.get(key)
        if clause is None:
            continue
        if clause.args.get("expressions") or clause.args.get("limit_options"):
            _fail_at("LIMIT BY and LIMIT options are not allowed", Code.FORBIDDEN_CLAUSE, clause)
        for part in (clause.args.get("expression"), clause.args.get("offset")):
            if part is None:
                continue
            value = _int_literal(part)
            if value is None or value > limits.max_limit:
                _fail_at(f"{key.upper()} takes an integer from 0 to {limits.max_limit}", Code.BAD_LIMIT, part)


def _check_table(table: exp.Table, schema: CorpusSchema) -> None:
    name = table.this
    if isinstance(name, exp.Func):
        _fail_at(
            f"table functions such as {name.sql(dialect=DIALECT)[:40]!r} are not allowed",
            Code.TABLE_FUNCTION,
            name,
        )
    if not isinstance(name, exp.Identifier):
        _fail_at(f"FROM reads {schema.table} and nothing else", Code.FORBIDDEN_CLAUSE, table)
    if table.args.get("db") or table.args.get("catalog"):
        _fail_at(
            f"only the corpus table {schema.table!r} may be read, not {table.sql()!r}",
            Code.FORBIDDEN_TABLE,
            table,
        )
    if name.name != schema.table:
        _fail_at(
            f"unknown table {name.name!r}; the corpus table is {schema.table!r}", Code.UNKNOWN_TABLE, table
        )
    for key, value in table.args.items():
        if key == "this" or value is None or value == [] or value is False:
            continue
        if key == "alias":
            _fail_at("table aliases are not allowed; qualify columns with the table name", Code.ALIAS, table)
        _fail_at(f"{key.upper()} is not allowed on a table", Code.FORBIDDEN_CLAUSE, table)


def _check_column(column: exp.Column, schema: CorpusSchema) -> None:
    if sentinel_of(column) is not None:
        return  # placeholders are checked by the placeholder pass
    if isinstance(column.this, exp.Star):
        _fail_at("'*' is not allowed; the outer SELECT projects id", Code.STAR, column)
    if column.args.get("db") or column.args.get("catalog"):
        _fail_at(f"column {column.sql()!r} names another database", Code.FORBIDDEN_TABLE, column)
    qualifier = column.table
    if qualifier and qualifier != schema.table:
        _fail_at(
            f"column {column.sql()!r} is qualified with {qualifier!r}, not {schema.table!r}",
            Code.UNKNOWN_COLUMN,
            column,
        )
    if not schema.has(column.name):
        _fail_at(
            f"no column {column.name!r} in {schema.table}; columns: {', '.join(schema.columns)}",
            Code.UNKNOWN_COLUMN,
            column,
        )


def _check_in(node: exp.In, limits: DslLimits) -> None:
    if node.args.get("is_global") or node.args.get("unnest"):
        _fail_at("GLOBAL IN and IN UNNEST are not allowed", Code.FORBIDDEN_SYNTAX, node)
    field = node.args.get("field")
    if field is not None and sentinel_of(field) is None:
        _fail_at(
            "IN takes a list of literals, a subquery or a placeholder, not a table",
            Code.FORBIDDEN_SYNTAX,
            node,
        )
    items = node.expressions
    if len(items) > limits.max_in_list:
        _fail_at(f"IN list of {len(items)} items; at most {limits.max_in_list}", Code.IN_LIST_TOO_LONG, node)
    for item in items:
        bare = item.this if isinstance(item, exp.Neg) else item
        if not isinstance(bare, exp.Literal | exp.Boolean | exp.Null):
            _fail_at("IN lists hold literals only", Code.FORBIDDEN_SYNTAX, item)
    query = node.args.get("query")
    if query is not None and not isinstance(query, exp.Subquery):
        _fail_at("IN takes a parenthesized subquery", Code.FORBIDDEN_SYNTAX, node)


def _check_node(node: exp.Expr, root: exp.Select, schema: CorpusSchema, limits: DslLimits) -> None:
    if isinstance(node, exp.Union | exp.Intersect | exp.Except):
        _fail_at(
            "UNION, INTERSECT and EXCEPT are not allowed; combine conditions with OR / AND NOT",
            Code.SET_OPERATION,
            node,
        )
    if isinstance(node, exp.Join | exp.Lateral):
        _fail_at("JOIN is not allowed; use id IN (SELECT id FROM ...)", Code.JOIN, node)
    if isinstance(node, exp.Alias | exp.TableAlias):
        _fail_at("aliases are not allowed in a program", Code.ALIAS, node)
    kind = type(node)  # exact classes: a subclass of an allowed class is a different construct
    if kind is exp.Anonymous:
        if node.name not in ALLOWED_ANONYMOUS:
            _fail_at(f"function {node.name!r} is not on the allow-list", Code.FORBIDDEN_FUNCTION, node)
    elif kind not in _ALLOWED_CLASSES:
        if isinstance(node, exp.Func):
            _fail_at(f"function {node.sql_name()} is not on the allow-list", Code.FORBIDDEN_FUNCTION, node)
        _fail_at(f"{kind.__name__} is not allowed in a program", Code.FORBIDDEN_SYNTAX, node)
    _check_slots(node)
    runnable.check_node(node, schema)
    if isinstance(node, _AGGREGATES) and node.find_ancestor(exp.Select) is root:
        _fail_at("aggregates belong in subqueries", Code.MISPLACED_AGGREGATE, node)
    if isinstance(node, exp.Select):
        _check_select(node, schema, node is root, limits)
    elif isinstance(node, exp.Column):
        _check_column(node, schema)
    elif isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):
        _fail_at("'*' is not allowed; the outer SELECT projects id", Code.STAR, node)
    elif isinstance(node, exp.In):
        _check_in(node, limits)
    elif isinstance(node, exp.Subquery):
        if not isinstance(node.this, exp.Select):
            _fail_at("a subquery is one SELECT", Code.SET_OPERATION, node)
        if any(v not in (None, [], False) for k, v in node.args.items() if k != "this"):
            _fail_at(
                "a subquery takes no alias or clauses outside its parentheses", Code.FORBIDDEN_CLAUSE, node
            )
    elif isinstance(node, exp.Var):
        if node.arg_key not in ("unit", "this") or node.name.upper() not in _UNITS:
            _fail_at(f"{node.name!r} is not allowed here", Code.FORBIDDEN_SYNTAX, node)
        if node.arg_key == "this" and not isinstance(node.parent, exp.Extract):
            _fail_at(f"{node.name!r} is not allowed here", Code.FORBIDDEN_SYNTAX, node)
    elif isinstance(node, exp.DataType):
        if node.this not in _CAST_TYPES or node.expressions or not isinstance(node.parent, exp.Cast):
            _fail_at(f"type {node.sql(dialect=DIALECT)!r} is not allowed", Code.FORBIDDEN_SYNTAX, node)
    elif isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null | exp.Boolean):
        _fail_at("IS takes NULL, TRUE or FALSE", Code.FORBIDDEN_SYNTAX, node)
    elif isinstance(node, exp.Literal) and node.is_string and len(node.this) > limits.max_literal_chars:
        _fail_at(f"string literal longer than {limits.max_literal_chars}", Code.LITERAL_TOO_LONG, node)


def _is_unit_word(node: exp.Expr) -> bool:
    if isinstance(node, exp.Var):
        return node.name.upper() in _UNITS
    return isinstance(node, exp.Literal) and node.is_string and node.this.upper() in _UNITS


def _check_slots(node: exp.Expr) -> None:
    """Refuse what sqlglot would render from a literal's text: every unit slot holds a bare unit word."""
    for key in _UNIT_SLOTS:
        unit = node.args.get(key)
        if unit is not None and not _is_unit_word(unit):
            _fail_at(
                f"a unit is one of {', '.join(sorted(_UNITS))}, not {unit.sql(dialect=DIALECT)[:40]!r}",
                Code.BAD_UNIT,
                unit,
            )
    if isinstance(node, exp.Extract) and not (isinstance(node.this, exp.Var) and _is_unit_word(node.this)):
        _fail_at(f"EXTRACT takes a unit, one of {', '.join(sorted(_UNITS))}", Code.BAD_UNIT, node)
    for key in _EMPTY_SLOTS.get(type(node), ()):
        if node.args.get(key) not in (None, False, [], ""):
            _fail_at(
                f"{type(node).__name__.upper()} takes no {key.upper()} argument in a program",
                Code.FORBIDDEN_SYNTAX,
                node,
            )


def _check_round_trip(tree: exp.Select, schema: CorpusSchema, limits: DslLimits) -> None:
    """The SQL that runs is rendered from ``tree``: it must parse back to a tree that passes every check
    again and renders to the very same text.

    A renderer that prints a literal's text as SQL (sqlglot does so for some argument slots) changes the
    program on the way; the text it produces then reads as another tree, which is checked here as if the
    model had written it; and every literal, unit word and column of the program must still be in it (a
    slot rendered from a node's name silently drops what the node held). Only normalisations that keep
    both (``toStartOfMonth(d)`` to ``dateTrunc('MONTH', d)``, added parentheses) pass.
    """
    rendered = tree.sql(dialect=DIALECT, comments=False)
    try:
        again = sqlglot.parse_one(rendered, dialect=DIALECT)
    except Exception:
        fail("the program's SQL does not parse back after rendering", Code.ROUND_TRIP)
    if _same_tree(tree, again):
        return  # the usual case: the very same tree, so every check already holds for what runs
    changed = "the program's SQL reads differently once rendered"
    if not isinstance(again, exp.Select):
        fail(f"{changed}: it becomes a {type(again).__name__}", Code.ROUND_TRIP)
    try:
        _check_size(again, limits)
        _check_placeholder_slots(again)
        for node in again.walk():
            _check_node(node, again, schema, limits)
    except ValidationError as exc:
        fail(f"{changed}, and then breaks a rule: {exc.message}", Code.ROUND_TRIP)
    if again.sql(dialect=DIALECT, comments=False) != rendered:
        fail(f"{changed}: rendering it again gives other SQL", Code.ROUND_TRIP)
    lost = _atoms(tree) - _atoms(again)
    if lost:
        # Something the model wrote (a literal, a unit, a column) did not reach the SQL that runs.
        fail(f"{changed}: {sorted(lost)[0][:40]!r} is lost on the way", Code.ROUND_TRIP)


def _same_tree(a: object, b: object) -> bool:
    """Structural equality of two trees (or argument values), parentheses aside, without copying either."""
    while isinstance(a, exp.Paren):
        a = a.this
    while isinstance(b, exp.Paren):
        b = b.this
    if isinstance(a, exp.Expr) and isinstance(b, exp.Expr):
        if type(a) is not type(b):
            return False
        keys = {k for k, v in a.args.items() if v not in (None, [], False)}
        if keys != {k for k, v in b.args.items() if v not in (None, [], False)}:
            return False
        return all(_same_tree(a.args[k], b.args[k]) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _atoms(tree: exp.Expr) -> Counter[str]:
    """The literals, unit words and column names of ``tree``, case-folded (sqlglot upper-cases units)."""
    return Counter(
        node.name.casefold() for node in tree.walk() if isinstance(node, exp.Literal | exp.Var | exp.Column)
    )


# Nodes whose value is never a truth value: ClickHouse refuses them as a filter ("Illegal type ... for
# filter") at run time; the schema says so before anything runs.
_NOT_BOOLEAN = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Interval, exp.Lower, exp.Upper, exp.Concat,
    exp.Substring, exp.Length, exp.StrPosition, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.DateDiff,
    exp.DateAdd, exp.DateSub, exp.TimestampTrunc, exp.DateTrunc, exp.DayOfWeekIso, exp.Year, exp.Month,
    exp.Day, exp.Extract, exp.Count, exp.Min, exp.Max, exp.Avg, exp.Sum, exp.Star,
)  # fmt: skip
_BOOLEAN_ANONYMOUS = frozenset({"empty", "notEmpty"})
_INTEGER = re.compile(r"[0-9]+")
_CONNECTIVES = (exp.And, exp.Or)


def _check_condition(node: exp.Expr | None, schema: CorpusSchema) -> None:
    """Refuse a WHERE / HAVING condition, or an operand of AND / OR / NOT, that cannot be true or false."""
    if node is None:
        return
    if isinstance(node, exp.Paren | exp.Not):
        _check_condition(node.this, schema)
        return
    if isinstance(node, _CONNECTIVES):
        _check_condition(node.this, schema)
        _check_condition(node.expression, schema)
        return
    what: str | None = None
    if isinstance(node, exp.Literal) and node.is_string:
        what = f"the string {node.sql(dialect=DIALECT)[:40]}"
    elif isinstance(node, exp.Literal) and not _INTEGER.fullmatch(node.this):
        # ClickHouse reads a whole number as a truth value (WHERE 1), and fails on 4.0 or 1e3 (CANNOT_CONVERT_TYPE).
        what = f"the number {node.this[:40]}"
    elif isinstance(node, exp.Column) and sentinel_of(node) is None and schema.has(node.name):
        dtype = schema.field(node.name).dtype
        if dtype is not DType.BOOL:
            what = f"the {dtype.value} column {node.name!r}"
    elif isinstance(node, exp.Anonymous) and node.name not in _BOOLEAN_ANONYMOUS:
        what = f"{node.name}(...)"
    elif isinstance(node, exp.Cast) and node.to.this is not exp.DataType.Type.BOOLEAN:
        what = f"a CAST to {node.to.sql(dialect=DIALECT)}"
    elif isinstance(node, _NOT_BOOLEAN):
        what = f"{type(node).__name__.upper()} (not a truth value)"
    if what is not None:
        _fail_at(
            f"a condition must be true or false, not {what}; compare it (=, <, IN, LIKE, ...)",
            Code.NOT_BOOLEAN,
            node,
        )


def _check_placeholder_slots(tree: exp.Select) -> None:
    # Before the allow-list walk, so that a placeholder in a wrong place is reported as such rather than
    # as whatever rule the surrounding clause breaks; the full placement rule is the placeholder pass's.
    for ident in tree.find_all(exp.Identifier):
        column = ident.parent
        if not SENTINEL.fullmatch(ident.name):
            continue
        if (
            not isinstance(column, exp.Column)
            or sentinel_of(column) is None
            or ident.arg_key != "this"
            or column.table
            or not isinstance(column.parent, exp.In)
            or column.arg_key != "field"
        ):
            raise ValidationError(
                "a placeholder may appear only as `id IN <p>` or `id NOT IN <p>`, without parentheses",
                code=Code.PLACEHOLDER_MISPLACED,
                path="sql",
                position=placeholder_position(ident),
            )


def check_sql(
    sql: str, schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS
) -> tuple[exp.Select, tuple[PlaceholderToken, ...]]:
    """Check a program's SQL; return its tree (placeholders as sentinels) and the placeholders as written.

    Every call checks afresh; :func:`serving.dsl.validate.validate` remembers what it derives from an
    accepted SQL text, so a sampled program that repeats its SQL costs no sqlglot work there.
    """
    tokens = check_text_and_tokens(sql, limits)
    marked, sites = mark_placeholders(sql, tokens)
    check_operands(tokens, sites)
    tree = parse(marked)
    if isinstance(tree, exp.Union | exp.Intersect | exp.Except):
        _fail_at(
            "UNION, INTERSECT and EXCEPT are not allowed; combine conditions with OR / AND NOT",
            Code.SET_OPERATION,
            tree,
        )
    if not isinstance(tree, exp.Select):
        _fail_at(f"a program's SQL is one SELECT, not {type(tree).__name__}", Code.NOT_SELECT, tree)
    _check_size(tree, limits)
    _check_placeholder_slots(tree)
    for node in tree.walk():
        _check_node(node, tree, schema, limits)
    for select in tree.find_all(exp.Select):
        for clause in ("where", "having"):
            part = select.args.get(clause)
            _check_condition(part.this if part is not None else None, schema)
    _check_round_trip(tree, schema, limits)
    return tree, sites
