"""Substitution: pure passes from a :class:`ValidatedProgram` to ClickHouse SQL text.

Both work on a copy of the tree; nothing from a program is pasted into SQL text, and ids become string
literals that sqlglot quotes. Each ``FROM <corpus table>`` becomes ``FROM <physical table> AS <corpus table>``,
so columns qualified with the corpus table's name keep resolving, in subqueries too.

>>> from indexing.schema import PRODUCTS
>>> from serving.dsl.parse import parse_program
>>> from serving.dsl.validate import validate
>>> v = validate(parse_program({"sql": "SELECT id FROM products WHERE id IN <text_1> AND id NOT IN <text_2>",
...     "retrieval_list": [{"type": "text", "field": "title", "query": "jeans"},
...                        {"type": "text", "field": "review", "query": "tears"}]}), PRODUCTS)
>>> substitute(v, {0: ["P1", "P'2"], 1: []}, table="prore.products__v0002")
"SELECT id FROM prore.products__v0002 AS products WHERE id IN ('P1', 'P''2') AND NOT FALSE"
>>> strip_retrievals(v)
'SELECT id FROM products WHERE TRUE AND NOT FALSE'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence

from sqlglot import exp

from serving.dsl.errors import Code, DslError
from serving.dsl.placeholders import PlaceholderUse, placeholder_sites, restore_placeholders
from serving.dsl.program import placeholder_name
from serving.dsl.validate import ValidatedProgram

_DIALECT = "clickhouse"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PHYSICAL = re.compile(rf"(?:(?P<db>{_NAME})\.)?(?P<table>{_NAME})")


def _physical(table: str) -> tuple[str | None, str]:
    match = _PHYSICAL.fullmatch(table)
    if match is None:
        raise DslError(f"physical table {table!r} is not [db.]name", code=Code.BAD_PHYSICAL_TABLE)
    return match.group("db"), match.group("table")


def _rename_tables(tree: exp.Expr, logical: str, table: str) -> None:
    db, name = _physical(table)
    for node in list(tree.find_all(exp.Table)):
        node.set("this", exp.to_identifier(name))
        node.set("db", exp.to_identifier(db) if db else None)
        node.set("alias", exp.TableAlias(this=exp.to_identifier(logical)))


def _render(tree: exp.Expr) -> str:
    return tree.sql(dialect=_DIALECT, comments=False)


def _rewritten(
    validated: ValidatedProgram, table: str | None, visit: Callable[[exp.In, PlaceholderUse], None]
) -> exp.Select:
    """A copy of ``validated``'s tree with ``visit`` applied to each placeholder predicate (it may change or
    replace it), and the corpus table read from ``table`` when one is given. The one walk of every pass here."""
    tree = validated.tree.copy()
    for predicate, use in placeholder_sites(tree):
        visit(predicate, use)
    if table is not None:
        _rename_tables(tree, validated.table, table)
    return tree


def substitute_tree(
    validated: ValidatedProgram, id_sets: Mapping[int, Sequence[str]], *, table: str
) -> exp.Select:
    """The tree of :func:`substitute`: a new tree (``validated``'s is not touched) with entry ``i``'s ids
    (``id_sets[i]``, 0-based) in place of its placeholders and the corpus table read from ``table``.

    For batching statements built from it as trees (rendered once), never by pasting its text.

    >>> from indexing.schema import PRODUCTS
    >>> from serving.dsl.parse import parse_program
    >>> from serving.dsl.validate import validate
    >>> v = validate(parse_program({"sql": "SELECT id FROM products WHERE price < 10 AND id IN <text_1>",
    ...     "retrieval_list": [{"type": "text", "field": "title", "query": "jeans"}]}), PRODUCTS)
    >>> substitute_tree(v, {0: ["P1"]}, table="t").args["where"].this.sql(dialect="clickhouse")
    "price < 10 AND id IN ('P1')"
    """

    def fill(predicate: exp.In, use: PlaceholderUse) -> None:
        if use.entry not in id_sets:
            raise DslError(
                f"no id set for entry {use.entry} (placeholder {use.entry + 1})", code=Code.MISSING_ID_SET
            )
        ids = id_sets[use.entry]
        if isinstance(ids, str) or not all(isinstance(i, str) for i in ids):
            raise DslError(
                f"the id set of entry {use.entry} must be a sequence of strings", code=Code.MISSING_ID_SET
            )
        if not ids:
            predicate.replace(exp.false())
            return
        predicate.set("field", None)
        predicate.set("expressions", [exp.Literal.string(i) for i in ids])

    return _rewritten(validated, table, fill)


def parameterize_tree(
    validated: ValidatedProgram, *, table: str, id_type: str = "String"
) -> tuple[exp.Select, tuple[tuple[str, int], ...]]:
    """The tree of :func:`substitute` with each placeholder a ClickHouse query parameter instead of its ids,
    and the parameters it holds as ``(name, entry)`` pairs (0-based entries, in order of first use).

    ``id IN <text_1>`` becomes ``id IN {text_1: Array(String)}``: the statement no longer depends on the
    id sets, so it is built and rendered once per program, and the ids travel beside it, bound by the
    store (``params=``). An empty id set binds an empty array: ``id IN []`` is false, as with literals.
    Programs cannot write parameters themselves (validation refuses braces), so every parameter in the
    tree is one this pass put there.

    >>> from indexing.schema import PRODUCTS
    >>> from serving.dsl.parse import parse_program
    >>> from serving.dsl.validate import validate
    >>> v = validate(parse_program({"sql": "SELECT id FROM products WHERE id IN <text_1> AND id NOT IN <image_2>",
    ...     "retrieval_list": [{"type": "text", "field": "title", "query": "jeans"},
    ...                        {"type": "image", "field": "image", "query": "denim"}]}), PRODUCTS)
    >>> tree, params = parameterize_tree(v, table="t")
    >>> render(tree), params
    ('SELECT id FROM t AS products WHERE id IN {text_1: Array(String)} AND NOT (id IN {image_2: Array(String)})', (('text_1', 0), ('image_2', 1)))
    """
    kind = _array_type(id_type)
    params: dict[str, int] = {}

    def bind(predicate: exp.In, use: PlaceholderUse) -> None:
        name = placeholder_name(use.modality, use.entry)
        params.setdefault(name, use.entry)
        predicate.set("expressions", [])
        predicate.set("field", exp.Placeholder(this=exp.var(name), kind=kind.copy()))

    tree = _rewritten(validated, table, bind)
    return tree, tuple(params.items())


@functools.cache
def _array_type(id_type: str) -> exp.DataType:
    # Parsing a type costs more than the rest of the pass; callers copy the cached node.
    return exp.DataType.build(f"Array({id_type})", dialect=_DIALECT)


def render(tree: exp.Expr) -> str:
    """ClickHouse SQL text of ``tree``, as :func:`substitute` renders it (no comments)."""
    return _render(tree)


def substitute(validated: ValidatedProgram, id_sets: Mapping[int, Sequence[str]], *, table: str) -> str:
    """ClickHouse SQL for ``validated`` with entry ``i``'s ids (``id_sets[i]``, 0-based) in place of its placeholders.

    An empty id set makes ``id IN <p>`` FALSE (so ``id NOT IN <p>`` is ``NOT FALSE``). The corpus table is read
    from the physical ``table`` (``name`` or ``db.name``). The rendering of :func:`substitute_tree`.
    """
    return _render(substitute_tree(validated, id_sets, table=table))


def strip_retrievals(validated: ValidatedProgram, *, table: str | None = None) -> str:
    """The structure-only query: the SQL with every placeholder predicate made to let every row through.

    A positive predicate ``id IN <p>`` becomes TRUE and a negative one (under an odd number of NOTs, as in
    ``id NOT IN <p>``) becomes FALSE, so its ``NOT`` is TRUE. The predicates sit only under AND / OR / NOT, so
    the result keeps every row the program could return for any id sets: a superset, the benchmarks'
    "super-query" and the sql-only ablation. Not a superset where a LIMIT cuts rows (the outer one, or one
    in a subquery that holds a placeholder) or where a subquery holding a placeholder groups (GROUP BY,
    HAVING): those are not monotone in their WHERE; the WHERE itself always is. With ``table`` the corpus
    table is renamed as in :func:`substitute`.
    """

    def let_through(predicate: exp.In, use: PlaceholderUse) -> None:
        predicate.replace(exp.true() if use.positive else exp.false())

    return _render(restore_placeholders(_rewritten(validated, table, let_through)))
