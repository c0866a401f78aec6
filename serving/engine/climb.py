"""Where a placeholder predicate sits in a program's tree, read from it up to the outer ``WHERE``.

Pushdown (:mod:`serving.engine.pushdown`: the guards of a placeholder) and conditional evaluation
(:mod:`serving.engine.conditional`: which placeholders chain) both climb from an ``id IN <p>`` predicate to the
outer ``WHERE``. The climb crosses plain self-subqueries under ``id IN`` (a filter on the corpus table,
:func:`~serving.engine.plan.is_plain_filter`: every row of the outer query satisfies what they select) and stops
below any subquery that cuts or groups, whose rows the outer conditions do not reach.
"""

from __future__ import annotations

from sqlglot import exp

from serving.engine.plan import is_plain_filter, reads_only

__all__ = ["and_chained", "climb", "disjunct_of", "or_reached"]


def climb(predicate: exp.In, table: str) -> tuple[list[exp.Expr], bool]:
    """The nodes between a placeholder predicate and the outer ``WHERE``, each paired with the child it was
    reached from, crossing plain self-subqueries (module docstring), and whether the climb reaches
    the outer ``WHERE`` (False: it stopped below a subquery that cuts or groups)."""
    steps: list[exp.Expr] = []
    node: exp.Expr = predicate
    while True:
        parent = node.parent
        if parent is None:
            return steps, False
        if isinstance(parent, exp.Where):
            select = parent.parent
            holder = select.parent if select is not None else None
            if holder is None or not isinstance(select, exp.Select):
                return steps, holder is None and isinstance(select, exp.Select)
            outer = holder.parent
            plain = is_plain_filter(select) and reads_only(select, table)
            if not (plain and isinstance(holder, exp.Subquery) and isinstance(outer, exp.In)):
                return steps, False  # outer guards do not reach into a subquery that cuts or groups
            node = outer
            continue
        steps.append(node)
        node = parent


def and_chained(predicate: exp.In, table: str) -> bool:
    """True when ``predicate`` is a conjunct of the outer ``WHERE``: every node above it is an ``AND`` or
    parentheses up to that ``WHERE``, crossing only plain self-subqueries under ``id IN`` (where every
    result row satisfies it, and its guards are the whole rest of the condition).

    >>> import sqlglot
    >>> tree = sqlglot.parse_one(
    ...     "SELECT id FROM products WHERE price < 9 AND (id IN text_1 AND rating > 4) AND "
    ...     "(id IN text_2 OR brand = 'x') AND NOT id IN text_3", read="clickhouse")
    >>> sorted((node.args["field"].name, and_chained(node, "products")) for node in tree.find_all(exp.In))
    [('text_1', True), ('text_2', False), ('text_3', False)]
    """
    steps, top = climb(predicate, table)
    return top and all(isinstance(node.parent, exp.And | exp.Paren) for node in steps)


def or_reached(predicate: exp.In, table: str) -> bool:
    """True when ``predicate`` is reached from the outer ``WHERE`` through ``AND``, ``OR`` and parentheses only
    (crossing plain self-subqueries under ``id IN``), with at least one ``OR``: a positive use that is not a
    conjunct, and under no ``NOT``.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one(
    ...     "SELECT id FROM products WHERE id IN text_1 AND (id IN text_2 OR (brand = 'x' AND id IN text_3)) "
    ...     "AND NOT (id IN text_4 OR price > 3)", read="clickhouse")
    >>> sorted((node.args["field"].name, or_reached(node, "products")) for node in tree.find_all(exp.In))
    [('text_1', False), ('text_2', True), ('text_3', True), ('text_4', False)]
    """
    return _through_or(*climb(predicate, table))


def _through_or(steps: list[exp.Expr], top: bool) -> bool:
    """:func:`or_reached` on a climb already made (:func:`climb`)."""
    parents = [node.parent for node in steps]
    return (
        top
        and all(isinstance(p, exp.And | exp.Or | exp.Paren) for p in parents)
        and any(isinstance(p, exp.Or) for p in parents)
    )


def disjunct_of(predicate: exp.In, table: str) -> exp.Expr | None:
    """The disjunct ``predicate`` is a conjunct of: the operand of its innermost ``OR`` that it is reached from
    through ``AND`` and parentheses only, when the predicate is :func:`or_reached` (so under no ``NOT``, and the
    ``OR`` itself reached from the outer ``WHERE`` through ``AND``, ``OR`` and parentheses). ``None`` otherwise.
    Every row that this disjunct makes a row lies in every list of the disjunct's positive conjuncts.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one(
    ...     "SELECT id FROM products WHERE (id IN text_1 AND id IN text_2) OR (brand = 'x' AND (id IN text_3 OR "
    ...     "id IN text_4)) OR id IN text_5", read="clickhouse")
    >>> found = {node.args["field"].name: disjunct_of(node, "products") for node in tree.find_all(exp.In)}
    >>> found["text_1"] is found["text_2"], found["text_3"] is found["text_4"], found["text_5"].sql()
    (True, False, 'id IN text_5')
    >>> disjunct_of(sqlglot.parse_one("SELECT id FROM products WHERE id IN text_1 AND id IN text_2",
    ...                               read="clickhouse").find(exp.In), "products") is None
    True
    """
    steps, top = climb(predicate, table)
    if not _through_or(steps, top):
        return None
    return next(node for node in steps if isinstance(node.parent, exp.Or))  # there is one: _through_or saw it
