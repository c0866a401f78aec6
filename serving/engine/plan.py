"""Planning passes over a validated program's tree: pure functions, tree in, tree out.

:func:`flatten_self_subqueries` removes the commonest cost of nested programs. In
``id IN (SELECT id FROM products WHERE c)`` the subquery reads the corpus table again and builds a
set; because ``id`` is the table's unique key and the outer row is a row of the same table, the
predicate holds exactly when ``c`` holds on the outer row itself, so it becomes ``(c)`` (and
``id NOT IN (...)`` becomes ``NOT (c)``). The rewrite is applied only where it is exact:

* the subquery is a plain filter (:func:`is_plain_filter`) on the corpus table itself, unaliased;
* ``c`` is built only from nodes that can never be NULL on non-nullable columns (comparisons,
  AND / OR / NOT, LIKE, BETWEEN, arithmetic without modulo, literals, columns, and ``IN`` lists or
  subqueries), and reads no column the schema declares nullable (``Field.nullable``), because ``IN``
  is two-valued and a NULL ``c`` would not be.

Placeholders move with their condition and keep their polarity: the NOT of ``id NOT IN (...)`` stays
on the path from the placeholder to the WHERE.

:func:`stable_order` makes a program's rows the same on every run. Without a total order, which rows
a ``LIMIT`` keeps and how ``ORDER BY`` ties come out depend on how ClickHouse happened to read the
parts, so a batch and a single run (or two training steps) could score one program differently.
Every ``SELECT id ...`` that has ``ORDER BY`` or ``LIMIT`` therefore ends its order with ``id``:
ties are broken by id, as the ranking contract breaks them.

:func:`pin_clock` makes ``now()``, ``today()`` and ``yesterday()`` constants: the reference time of the
index version (UTC, written when the version was built). A program then means the same thing on every
run, so a cached result never goes stale at midnight and a reward or a gold answer does not depend on
the day it was computed.

>>> import sqlglot
>>> tree = sqlglot.parse_one(
...     "SELECT id FROM products WHERE price < 9 AND id NOT IN (SELECT id FROM products WHERE rating > 4)",
...     read="clickhouse")
>>> flatten_self_subqueries(tree, "products").sql(dialect="clickhouse")
'SELECT id FROM products WHERE price < 9 AND NOT (rating > 4)'
"""

from __future__ import annotations

import datetime

from sqlglot import exp

_PLAIN_ARGS = frozenset({"expressions", "distinct", "from_", "where"})

_NEVER_NULL: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Or, exp.Not, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Between, exp.Like, exp.ILike, exp.In, exp.Is, exp.Column, exp.Identifier, exp.Literal,
    exp.Boolean, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Tuple,
)  # fmt: skip


def is_plain_filter(select: exp.Expr) -> bool:
    """True for ``SELECT [DISTINCT] id FROM <table> WHERE <cond>`` with no other clause."""
    if not isinstance(select, exp.Select):
        return False
    used = {key for key, value in select.args.items() if value}
    if not used <= _PLAIN_ARGS or "where" not in used:
        return False
    distinct = select.args.get("distinct")
    if distinct is not None and (not isinstance(distinct, exp.Distinct) or distinct.args.get("on")):
        return False
    cols = select.expressions
    return len(cols) == 1 and isinstance(cols[0], exp.Column) and cols[0].name == "id" and not cols[0].table


def reads_only(select: exp.Select, table: str) -> bool:
    """True when ``select`` reads the corpus table ``table`` alone, unaliased (no join, no other table)."""
    source = select.args.get("from_")
    if source is None or source.args.get("expressions") or select.args.get("joins"):
        return False
    node = source.this
    return (
        isinstance(node, exp.Table)
        and node.name == table
        and not node.args.get("db")
        and not node.args.get("catalog")
        and node.alias in ("", table)
    )


def _never_null(cond: exp.Expr, nullable: frozenset[str]) -> bool:
    stack = [cond]
    while stack:
        node = stack.pop()
        if not isinstance(node, _NEVER_NULL) or (isinstance(node, exp.Literal) and node.this is None):
            return False
        if isinstance(node, exp.Column) and node.name in nullable:
            return False
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            # `x IN (subquery)` is two-valued whatever the subquery holds; only its left side matters.
            stack.append(node.this)
            continue
        stack.extend(node.iter_expressions())
    return True


def _flattenable(node: exp.In, table: str, nullable: frozenset[str]) -> exp.Expr | None:
    """The condition that replaces ``node``, or None when the rewrite would not be exact."""
    left = node.this
    if not (isinstance(left, exp.Column) and left.name == "id" and left.table in ("", table)):
        return None
    query = node.args.get("query")
    select = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(select, exp.Select) or not is_plain_filter(select) or not reads_only(select, table):
        return None
    cond = select.args["where"].this
    return cond if _never_null(cond, nullable) else None


def _ordered_by_id() -> exp.Ordered:
    return exp.Ordered(this=exp.column("id"), desc=False, nulls_first=False)


def _needs_id_order(select: exp.Select) -> bool:
    if not (select.args.get("order") or select.args.get("limit")):
        return False
    if select.args.get("group") or any(col.find(exp.AggFunc) for col in select.expressions):
        return False  # `id` is not a row key there; such selects get no tiebreak
    projects_id = any(
        isinstance(c, exp.Column) and c.name == "id" and not c.table for c in select.expressions
    )
    order = select.args.get("order")
    already = order is not None and any(
        isinstance(o, exp.Ordered) and isinstance(o.this, exp.Column) and o.this.name == "id"
        for o in order.expressions
    )
    return projects_id and not already


def stable_order(tree: exp.Select) -> exp.Select:
    """``tree`` with ``id`` as the last sort key of every ``SELECT id`` that orders or limits its rows.

    Returns a changed copy, or ``tree`` itself when nothing needs a tiebreak.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT id FROM products ORDER BY price DESC LIMIT 3", read="clickhouse")
    >>> stable_order(tree).sql(dialect="clickhouse")
    'SELECT id FROM products ORDER BY price DESC, id ASC LIMIT 3'
    """
    if not any(_needs_id_order(s) for s in tree.find_all(exp.Select)):
        return tree
    out = tree.copy()
    for select in list(out.find_all(exp.Select)):
        if not _needs_id_order(select):
            continue
        order = select.args.get("order")
        if order is None:
            select.set("order", exp.Order(expressions=[_ordered_by_id()]))
        else:
            order.append("expressions", _ordered_by_id())
    return out


def flatten_self_subqueries(
    tree: exp.Select, table: str, nullable: frozenset[str] = frozenset()
) -> exp.Select:
    """``tree`` with each exact ``id [NOT] IN (SELECT id FROM <table> WHERE c)`` made ``(c)``.

    ``nullable`` names the columns that may hold NULL (:attr:`indexing.schema.CorpusSchema.nullable_fields`);
    a condition that reads one is left in its subquery.

    Returns a changed copy, or ``tree`` itself when it holds no subquery (trees are never changed in place).
    """
    if not any(node.args.get("query") is not None for node in tree.find_all(exp.In)):
        return tree
    out = tree.copy()
    # Breadth-first order reversed visits inner subqueries before the ones that hold them.
    for node in reversed(list(out.find_all(exp.In))):
        cond = _flattenable(node, table, nullable)
        if cond is not None:
            node.replace(exp.Paren(this=cond.copy()))
    return out


_CLOCK = frozenset({"now", "today", "yesterday"})


def _clock_name(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str) and node.this.lower() in _CLOCK:
        return node.this.lower()
    if isinstance(node, exp.CurrentTimestamp):
        return "now"
    if isinstance(node, exp.CurrentDate):
        return "today"
    return None


def _pinned(name: str, args: list[exp.Expr], now: datetime.datetime) -> exp.Expr:
    if name == "now":
        moment = exp.Anonymous(
            this="toDateTime",
            expressions=[exp.Literal.string(now.strftime("%Y-%m-%d %H:%M:%S")), exp.Literal.string("UTC")],
        )
        # now(tz) is the same instant shown in tz.
        return exp.Anonymous(this="toDateTime", expressions=[moment, args[0].copy()]) if args else moment
    day = now.date() - datetime.timedelta(days=1 if name == "yesterday" else 0)
    return exp.Anonymous(this="toDate", expressions=[exp.Literal.string(day.isoformat())])


def pin_clock(tree: exp.Select, now: datetime.datetime) -> exp.Select:
    """``tree`` with ``now()`` as ``toDateTime('<now>', 'UTC')`` and ``today()`` / ``yesterday()`` as the
    ``toDate`` of ``now``'s UTC date and the day before.

    ``now`` is the index version's reference time (:attr:`indexing.index.IndexHandle.reference_time`); a
    naive ``now`` is taken as UTC. Returns a changed copy, or ``tree`` itself when it reads no clock.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT id FROM emails WHERE date > now() - INTERVAL 7 DAY", read="clickhouse")
    >>> pin_clock(tree, datetime.datetime(2024, 5, 1, 12, 30)).sql(dialect="clickhouse")
    "SELECT id FROM emails WHERE date > toDateTime('2024-05-01 12:30:00', 'UTC') - INTERVAL '7' DAY"
    """
    if not any(_clock_name(node) for node in tree.walk()):
        return tree
    utc = now.astimezone(datetime.UTC) if now.tzinfo else now.replace(tzinfo=datetime.UTC)

    def pin(node: exp.Expr) -> exp.Expr:
        name = _clock_name(node)
        if name is None:
            return node
        return _pinned(name, list(node.expressions) if isinstance(node, exp.Anonymous) else [], utc)

    out = tree.transform(pin)
    assert isinstance(out, exp.Select)
    return out
