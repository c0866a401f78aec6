"""Placeholders ``<text_k>`` / ``<image_k>``: lexing them out of the SQL and finding where they sit in the tree.

A placeholder is not SQL. The lexer pass works on sqlglot's tokens, so text inside string literals is never
touched, and turns each placeholder's angle brackets into spaces (``<text_1>`` becomes `` text_1 ``): sqlglot
parses the name as a column, the spaces keep it apart from its neighbours (``id IN<text_1>AND ...``), and
the text keeps its length, so every offset sqlglot reports is an offset in the program's own SQL. The
names ``text_k`` / ``image_k`` are reserved: a program that writes one as an identifier is refused.

>>> text, sites = mark_placeholders("SELECT id FROM products WHERE id IN<text_1>AND brand = '<text_2>'")
>>> text
"SELECT id FROM products WHERE id IN text_1 AND brand = '<text_2>'"
>>> sites
(PlaceholderToken(modality='text', number=1, position=35),)

**Polarity.** An occurrence is *positive* when it is ``id IN <p>`` under an even number of ``NOT`` on the path
from the outer ``WHERE`` (``id NOT IN <p>`` is ``NOT (id IN <p>)``: one ``NOT``). A placeholder inside a
subquery counts the ``NOT`` of the ``id [NOT] IN (SELECT ...)`` that holds the subquery as well. The ranking
contract (DESIGN.md section 3) sums over the entries that have at least one positive occurrence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from sqlglot import exp
from sqlglot.tokenizer_core import Token, TokenType

from serving.dsl.errors import Code, ValidationError
from serving.dsl.program import placeholder_of

SENTINEL = re.compile(r"(text|image)_(0|[1-9][0-9]*)")
"""The name a placeholder's column has in the tree: ``<text_1>`` is the column ``text_1``."""
_RESERVED = re.compile(r"(?i)(text|image)_[0-9]+")
# Near misses get a precise error rather than a parse error: <Text_1>, <text1>, <img_1>, <text_01>.
_NEAR = re.compile(r"(?i)(text|image|img|txt)_?\w*")
_IDENTIFIER_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


@dataclass(frozen=True)
class PlaceholderToken:
    """A placeholder as written: its modality, its 1-based number and its offset in the SQL."""

    modality: Literal["text", "image"]
    number: int
    position: int


@dataclass(frozen=True)
class PlaceholderUse:
    """A placeholder as used: the 0-based entry it names, its modality, polarity and offset in the SQL."""

    entry: int
    modality: Literal["text", "image"]
    positive: bool
    position: int


def _misplaced(message: str, position: int | None) -> NoReturn:
    raise ValidationError(message, code=Code.PLACEHOLDER_MISPLACED, path="sql", position=position)


def _modality(word: str) -> Literal["text", "image"]:
    return "text" if word == "text" else "image"


def _adjacent(a: Token, b: Token) -> bool:
    return a.end + 1 == b.start


def mark_placeholders(
    sql: str, tokens: Sequence[Token] | None = None
) -> tuple[str, tuple[PlaceholderToken, ...]]:
    """Turn each ``<text_k>`` / ``<image_k>`` outside literals into `` text_k ``; say where each was."""
    if tokens is None:
        from sqlglot.dialects.clickhouse import ClickHouse

        tokens = ClickHouse().tokenize(sql)
    chars = list(sql)
    sites: list[PlaceholderToken] = []
    names: set[int] = set()
    for lt, name, gt in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if (
            lt.token_type != TokenType.LT
            or gt.token_type != TokenType.GT
            or name.token_type not in _IDENTIFIER_TOKENS
        ):
            continue
        match = SENTINEL.fullmatch(name.text) if name.token_type == TokenType.VAR else None
        contiguous = _adjacent(lt, name) and _adjacent(name, gt)
        if match is not None and contiguous:
            sites.append(PlaceholderToken(_modality(match.group(1)), int(match.group(2)), lt.start))
            chars[lt.start] = chars[gt.start] = " "
            names.add(name.start)
        elif match is not None or (contiguous and _NEAR.fullmatch(name.text)):
            raise ValidationError(
                f"malformed placeholder near {sql[lt.start : gt.end + 1]!r}; write <text_k> or <image_k>, k from 1",
                code=Code.BAD_PLACEHOLDER,
                path="sql",
                position=lt.start,
            )
    for tok in tokens:
        if tok.token_type in _IDENTIFIER_TOKENS and tok.start not in names and _RESERVED.fullmatch(tok.text):
            raise ValidationError(
                f"identifier {tok.text!r} is reserved for placeholders; write <text_k> or <image_k>",
                code=Code.RESERVED_IDENTIFIER,
                path="sql",
                position=tok.start,
            )
    return "".join(chars), tuple(sites)


def sentinel_of(node: exp.Expr | None) -> tuple[Literal["text", "image"], int] | None:
    """``(modality, number)`` when ``node`` is a placeholder sentinel column, else None."""
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return None
    ident = node.this
    if not isinstance(ident, exp.Identifier) or ident.quoted:
        return None
    match = SENTINEL.fullmatch(ident.name)
    if match is None:
        return None
    return _modality(match.group(1)), int(match.group(2))


def placeholder_position(column: exp.Expr) -> int | None:
    """Offset of the ``<`` of the placeholder whose column is ``column``."""
    start = position_of(column)
    return None if start is None else start - 1


def position_of(node: exp.Expr) -> int | None:
    """Offset in the SQL of the first token sqlglot recorded under ``node``, if any."""
    for sub in node.walk():
        start = sub.meta_get("start")
        if isinstance(start, int):
            return start
    return None


def _is_id_column(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Column) and node.name == "id" and sentinel_of(node) is None


def _negations_to_where(node: exp.Expr) -> tuple[int, exp.Select]:
    """Count NOTs from a predicate up to its WHERE; fail unless only AND / OR / NOT / parentheses lie between."""
    nots = 0
    current = node
    while True:
        parent = current.parent
        if isinstance(parent, exp.Not):
            nots += 1
        elif isinstance(parent, exp.Where):
            select = parent.parent
            if not isinstance(select, exp.Select):
                _misplaced("a placeholder predicate must sit in a WHERE", position_of(node))
            return nots, select
        elif not isinstance(parent, exp.And | exp.Or | exp.Paren):
            _misplaced(
                "a placeholder predicate may be combined only with AND, OR and NOT in a WHERE",
                position_of(node),
            )
        current = parent


def _polarity(column: exp.Column) -> bool:
    """True when the placeholder in ``column`` is positive (see the module docstring)."""
    position = placeholder_position(column)
    predicate = column.parent
    if column.args.get("table") or not isinstance(predicate, exp.In) or column.arg_key != "field":
        _misplaced("a placeholder may appear only as `id IN <p>` or `id NOT IN <p>`", position)
    nots = 0
    while True:
        if not _is_id_column(predicate.this):
            _misplaced("a placeholder may be tested only against the id column: `id IN <p>`", position)
        count, select = _negations_to_where(predicate)
        nots += count
        holder = select.parent
        if holder is None:
            return nots % 2 == 0
        outer = holder.parent
        if not isinstance(holder, exp.Subquery) or not isinstance(outer, exp.In) or holder.arg_key != "query":
            _misplaced(
                "a placeholder inside a subquery needs that subquery under `id [NOT] IN (...)`", position
            )
        predicate = outer


def placeholder_sites(tree: exp.Expr) -> list[tuple[exp.In, PlaceholderUse]]:
    """Each placeholder predicate of ``tree`` with its use; raises ``placeholder_misplaced`` for a bad position."""
    out: list[tuple[exp.In, PlaceholderUse]] = []
    for column in tree.find_all(exp.Column):
        found = sentinel_of(column)
        if found is None:
            continue
        positive = _polarity(column)
        predicate = column.parent
        assert isinstance(predicate, exp.In)
        modality, number = found
        out.append(
            (predicate, PlaceholderUse(number - 1, modality, positive, placeholder_position(column) or 0))
        )
    out.sort(key=lambda pair: pair[1].position)
    return out


def restore_placeholders(tree: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` that renders each sentinel back as ``<text_k>`` / ``<image_k>`` (for display)."""

    def back(node: exp.Expr) -> exp.Expr:
        found = sentinel_of(node)
        if found is None:
            return node
        modality, number = found
        return exp.Var(this=placeholder_of(modality, number - 1))

    return tree.transform(back)
