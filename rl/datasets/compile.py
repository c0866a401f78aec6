"""Step 3a of synthesis: compile a condition tree into a DSL program.

Semantic leaves become ``id IN <text_k>`` (``id NOT IN`` when negated) with one retrieval entry each,
numbered by position; structured leaves become SQL predicates whose literals are quoted by sqlglot.

>>> from rl.datasets.tree import And, Leaf, Not
>>> t = And((Leaf("structured", "brand", "=", ("Levi's",)), Not(Leaf("text", "review", "sim", ("too tight",)))))
>>> p = compile_tree(t, "products")
>>> p.sql
"SELECT DISTINCT id FROM products WHERE brand = 'Levi''s' AND id NOT IN <text_1>"
>>> p.retrieval_list[0].query
'too tight'
"""

from __future__ import annotations

from sqlglot import exp

from rl.datasets.tree import And, Leaf, Node, Not, Or, Value
from serving.dsl.limits import DEFAULT_LIMITS
from serving.dsl.program import Program, Retrieval


def literal(v: Value) -> str:
    """``v`` as a ClickHouse SQL literal, quoted by sqlglot (so ``Levi's`` stays one string)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(exp.Literal.string(v).sql(dialect="clickhouse"))


def column(leaf: Leaf) -> str:
    """The column expression a structured leaf tests: ``toYear(date)``, ``toDate(date)`` or the field."""
    if leaf.transform == "year":
        return f"toYear({leaf.field})"
    if leaf.transform == "date":
        return f"toDate({leaf.field})"
    return leaf.field


def predicate(leaf: Leaf) -> str:
    """The SQL predicate of a structured leaf (never negated here)."""
    col = column(leaf)
    vals = [literal(v) for v in leaf.values]
    if leaf.op == "between":
        return f"{col} BETWEEN {vals[0]} AND {vals[1]}"
    if leaf.op == "in":
        return f"{col} IN ({', '.join(vals)})"
    return f"{col} {leaf.op} {vals[0]}"


class _Compiler:
    def __init__(self, k: int) -> None:
        self.k = k
        self.entries: list[Retrieval] = []

    def placeholder(self, leaf: Leaf) -> str:
        entry = Retrieval(
            type="image" if leaf.modality == "image" else "text",
            field=leaf.field,
            query=leaf.phrase,
            k=self.k,
        )
        self.entries.append(entry)
        return Program.placeholder(len(self.entries) - 1, entry)

    def leaf(self, leaf: Leaf, negated: bool) -> str:
        if leaf.semantic:
            return f"id {'NOT IN' if negated else 'IN'} {self.placeholder(leaf)}"
        text = predicate(leaf)
        return f"NOT ({text})" if negated else text

    def node(self, node: Node, negated: bool = False) -> str:
        if isinstance(node, Leaf):
            return self.leaf(node, negated)
        if isinstance(node, Not):
            inner = node.child
            if (
                isinstance(inner, Or)
                and not negated
                and not any(isinstance(n, Leaf) and n.semantic for n in inner.children)
            ):
                return f"NOT ({self.node(inner)})"
            return self.node(inner, not negated)
        if negated:
            # De Morgan, so that every negated semantic leaf reads ``id NOT IN`` and stays out of ranking.
            flipped: And | Or = And(node.children) if isinstance(node, Or) else Or(node.children)
            return self.node(_negate_all(flipped))
        word = " AND " if isinstance(node, And) else " OR "
        parts = []
        for child in node.children:
            text = self.node(child)
            # Parenthesize any nested connective: explicit groups read the same as the tree.
            if isinstance(child, And | Or) and len(child.children) > 1:
                text = f"({text})"
            parts.append(text)
        return word.join(parts)


def _negate_all(node: And | Or) -> Node:
    kids = tuple(Not(c) for c in node.children)
    return And(kids) if isinstance(node, And) else Or(kids)


def compile_tree(tree: Node, table: str, *, k: int = DEFAULT_LIMITS.default_k) -> Program:
    """The gold program of ``tree`` over ``table``: ``SELECT DISTINCT id FROM table WHERE ...``.

    Every entry has width ``k``, by default the language's default width (the paper's K).
    """
    c = _Compiler(k)
    where = c.node(tree)
    return Program(f"SELECT DISTINCT id FROM {table} WHERE {where}", tuple(c.entries))
