"""The typed condition tree of a benchmark query: ``And`` / ``Or`` / ``Not`` over ``Leaf`` conditions.

A tree is built for one gold document. Each leaf is one atomic condition on one field; a leaf under
``Not`` is a condition the gold document does *not* satisfy, every other leaf one it does (under an
``Or`` at least one branch holds). Compilation to a program and verbalization are separate passes.

>>> t = And((Leaf("structured", "price", "<", (200,)), Not(Leaf("structured", "brand", "=", ("Bose",)))))
>>> [leaf.field for leaf in leaves(t)], operators(t)
(['price', 'brand'], ['<', '=', 'AND', 'NOT'])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Modality = Literal["structured", "text", "image"]
Value = str | int | float | bool

COMPARISONS = ("=", "<", "<=", ">", ">=", "between", "in")
"""Operators of structured leaves. ``between`` has two values (low, high); ``in`` two or more."""
SEMANTIC_OP = "sim"
"""Operator of text and image leaves: the document is in the top-k of a vector search."""


@dataclass(frozen=True)
class Leaf:
    """One atomic condition.

    ``transform`` applies to the column first (``year`` or ``date`` for date fields). A semantic leaf
    (``modality`` text or image) carries the searched ``phrase`` in ``values[0]`` and the vocabulary
    ``facet`` it stands for.
    """

    modality: Modality
    field: str
    op: str
    values: tuple[Value, ...]
    transform: str | None = None
    facet: str | None = None

    @property
    def semantic(self) -> bool:
        return self.modality != "structured"

    @property
    def phrase(self) -> str:
        """The searched phrase of a semantic leaf."""
        return str(self.values[0])


@dataclass(frozen=True)
class And:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    child: Node


Node = Leaf | And | Or | Not


def children(node: Node) -> tuple[Node, ...]:
    """The direct children of ``node`` (none for a leaf)."""
    if isinstance(node, And | Or):
        return node.children
    if isinstance(node, Not):
        return (node.child,)
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node, parents before children, left to right."""
    yield node
    for child in children(node):
        yield from walk(child)


def leaves(node: Node) -> list[Leaf]:
    """The leaves of ``node`` from left to right."""
    return [n for n in walk(node) if isinstance(n, Leaf)]


def signed_leaves(node: Node, negated: bool = False) -> Iterator[tuple[Leaf, bool]]:
    """Each leaf with whether it sits under an odd number of ``Not`` nodes."""
    if isinstance(node, Leaf):
        yield node, negated
    elif isinstance(node, Not):
        yield from signed_leaves(node.child, not negated)
    else:
        for child in node.children:
            yield from signed_leaves(child, negated)


def depth(node: Node) -> int:
    """Nesting depth of the boolean connectives (``And``/``Or``); a leaf or ``Not(leaf)`` is 0."""
    if isinstance(node, Leaf):
        return 0
    if isinstance(node, Not):
        return depth(node.child)
    return 1 + max(depth(c) for c in node.children)


def modalities(node: Node) -> list[str]:
    """Sorted modalities the tree uses."""
    return sorted({leaf.modality for leaf in leaves(node)})


def operators(node: Node) -> list[str]:
    """Sorted operators the tree uses: comparison operators, AND/OR/NOT and the semantic
    ``id IN <text>``-style membership tests (``id NOT IN`` for negated semantic leaves)."""
    ops: set[str] = set()
    for n in walk(node):
        if isinstance(n, And):
            ops.add("AND")
        elif isinstance(n, Or):
            ops.add("OR")
        elif isinstance(n, Not) and not (isinstance(n.child, Leaf) and n.child.semantic):
            ops.add("NOT")
    for leaf, negated in signed_leaves(node):
        if leaf.semantic:
            ops.add(f"id {'NOT IN' if negated else 'IN'} <{leaf.modality}>")
        else:
            ops.add(leaf.op.upper() if leaf.op in ("between", "in") else leaf.op)
    return sorted(ops)


def to_json(node: Node) -> dict[str, object]:
    """A plain-JSON form of the tree (stored with each instance for analysis)."""
    if isinstance(node, Leaf):
        out: dict[str, object] = {
            "leaf": node.modality,
            "field": node.field,
            "op": node.op,
            "values": list(node.values),
        }
        if node.transform:
            out["transform"] = node.transform
        if node.facet:
            out["facet"] = node.facet
        return out
    if isinstance(node, Not):
        return {"not": to_json(node.child)}
    key = "and" if isinstance(node, And) else "or"
    return {key: [to_json(c) for c in node.children]}


def from_json(data: Mapping[str, Any]) -> Node:
    """The tree of :func:`to_json`'s form (an instance's stored ``tree``, parsed).

    >>> t = Or((Leaf("structured", "price", "<", (200,)), Not(Leaf("text", "review", "sim", ("quiet",), facet="q"))))
    >>> from_json(to_json(t)) == t
    True
    """
    if "leaf" in data:
        return Leaf(
            data["leaf"],
            data["field"],
            data["op"],
            tuple(data["values"]),
            transform=data.get("transform"),
            facet=data.get("facet"),
        )
    if "not" in data:
        return Not(from_json(data["not"]))
    if "and" in data:
        return And(tuple(from_json(c) for c in data["and"]))
    return Or(tuple(from_json(c) for c in data["or"]))
