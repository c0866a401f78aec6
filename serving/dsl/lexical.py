"""The text and token stages of the SQL checks (:mod:`serving.dsl.safety` runs them first), and the parse.

1. text: length cap; no control, format or private-use characters anywhere; outside string literals only
   printable ASCII (homoglyph keywords, fullwidth semicolons and zero-width spaces stop here);
2. tokens (sqlglot's ClickHouse tokenizer): the statement starts with SELECT; no comments (sqlglot would
   re-emit them, and a comment is where a second statement hides); no ``;``; no query parameters, arrays,
   heredocs or other string forms; no INTO / SETTINGS / FORMAT; literal length and parenthesis depth capped;
   no operator or list separator left without its operand (sqlglot drops it silently);
3. :func:`parse`: exactly one statement, parse errors with their offset and a message that does not depend
   on the process.

Each refuses with a :class:`~serving.dsl.errors.ValidationError` of path ``sql``, a typed code and an offset.

>>> tokens = check_text_and_tokens("SELECT id FROM products WHERE price < 20")
>>> [t.text for t in tokens][:3]
['SELECT', 'id', 'FROM']
>>> check_text_and_tokens("SELECT id FROM products; DROP TABLE products")
Traceback (most recent call last):
...
serving.dsl.errors.ValidationError: a program's SQL is one statement and holds no ';'
"""

from __future__ import annotations

import re
import unicodedata
from typing import NoReturn

import sqlglot
from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from core.logs import drop_messages
from serving.dsl import runnable
from serving.dsl.errors import Code, ValidationError
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.placeholders import PlaceholderToken

DIALECT = ClickHouse()
"""The dialect every program's SQL is tokenized, parsed and rendered in."""


# sqlglot warns about a bad JSON path in a program that is then refused with one typed error (JSON functions
# are not on the allow-list); the user sees that line alone.
drop_messages("sqlglot", "Invalid JSON path syntax")
_CLASS_REPR = re.compile(r"<class '[\w.]*?(\w+)'>")
# sqlglot names the first missing argument of a node from a set (``Expression.required_args``), whose order is
# the process's string hash: ``a AND`` with both sides missing says 'this' in one process and 'expression' in
# another. The reward's message must not depend on the process, so the argument's name is dropped.
_MISSING_ARG = re.compile(r"Required keyword: '\w+' missing for (\w+)")

# Characters never legitimate anywhere in a program's SQL, including inside string literals.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_LAYOUT = frozenset("\t\n\r")

_FORBIDDEN_TOKENS: dict[TokenType, str] = {
    TokenType.PLACEHOLDER: "query parameters",
    TokenType.PARAMETER: "parameters",
    TokenType.L_BRACE: "braces (query parameters, maps)",
    TokenType.R_BRACE: "braces (query parameters, maps)",
    TokenType.L_BRACKET: "arrays",
    TokenType.R_BRACKET: "arrays",
    TokenType.COLON: "':'",
    TokenType.DCOLON: "'::' casts (write CAST(x AS T))",
    TokenType.HEREDOC_STRING: "heredoc strings",
    TokenType.RAW_STRING: "raw strings",
    TokenType.BYTE_STRING: "byte strings",
    TokenType.HEX_STRING: "hex strings",
    TokenType.BIT_STRING: "bit strings",
    TokenType.NATIONAL_STRING: "national strings",
    TokenType.UNICODE_STRING: "unicode escape strings",
}
_CLAUSE_TOKENS: dict[TokenType, Code] = {
    TokenType.INTO: Code.INTO_CLAUSE,
    TokenType.SETTINGS: Code.SETTINGS_CLAUSE,
    TokenType.FORMAT: Code.FORMAT_CLAUSE,
}

# Tokens after which an operand must follow: sqlglot silently drops an operand that is missing
# (``id IN (+)`` and ``id IN (, )`` both parse as ``id IN ()``), so a dangling one is refused here.
_NEEDS_OPERAND = frozenset(
    {
        TokenType.L_PAREN, TokenType.COMMA, TokenType.PLUS, TokenType.DASH, TokenType.SLASH, TokenType.MOD, TokenType.EQ, TokenType.NEQ, TokenType.GT, TokenType.GTE,
        TokenType.LT, TokenType.LTE, TokenType.AND, TokenType.OR, TokenType.NOT, TokenType.DPIPE,
    }
)  # fmt: skip
_OPERAND_MISSING = frozenset({TokenType.COMMA, TokenType.R_PAREN})


def fail(message: str, code: Code, position: int | None = None) -> NoReturn:
    """Refuse the program's SQL: a :class:`~serving.dsl.errors.ValidationError` at ``position``."""
    raise ValidationError(message, code=code, path="sql", position=position)


def _check_characters(sql: str) -> None:
    for i, ch in enumerate(sql):
        if ch not in _LAYOUT and unicodedata.category(ch) in _BAD_CATEGORIES:
            fail(f"character U+{ord(ch):04X} is not allowed in a program", Code.BAD_CHARACTER, i)


def tokenize(sql: str) -> list[Token]:
    """``sql`` as sqlglot's ClickHouse tokens; text that does not tokenize is a syntax error."""
    try:
        return list(DIALECT.tokenize(sql))
    except TokenError as exc:
        fail(f"SQL does not tokenize: {exc}", Code.SQL_SYNTAX)


def _check_tokens(sql: str, tokens: list[Token], limits: DslLimits) -> None:
    strings = [(t.start, t.end) for t in tokens if t.token_type == TokenType.STRING]
    inside = bytearray(len(sql))
    for start, end in strings:
        inside[start : end + 1] = b"\x01" * (end + 1 - start)
    for i, ch in enumerate(sql):
        if not inside[i] and not (ch.isascii() and (ch.isprintable() or ch in _LAYOUT)):
            # Keywords, identifiers and punctuation are ASCII: a homoglyph, a fullwidth ';' or a
            # zero-width space outside a literal is a smuggling attempt, never a typo worth repairing.
            fail(f"character U+{ord(ch):04X} outside a string literal", Code.BAD_CHARACTER, i)
    if not tokens:
        fail("the SQL is empty", Code.SQL_SYNTAX, 0)
    first = tokens[0]
    if first.token_type == TokenType.WITH:
        fail("WITH is not allowed; use a subquery: id IN (SELECT id FROM ...)", Code.WITH_CLAUSE, first.start)
    if first.token_type != TokenType.SELECT:
        hint = " (drop the outer parentheses)" if first.token_type == TokenType.L_PAREN else ""
        fail(f"a program's SQL is one SELECT, not {first.text.upper()!r}{hint}", Code.NOT_SELECT, first.start)
    depth = 0
    for tok in tokens:
        if tok.comments:
            fail("comments are not allowed in a program's SQL", Code.COMMENT, tok.start)
        kind = tok.token_type
        if kind == TokenType.SEMICOLON:
            fail("a program's SQL is one statement and holds no ';'", Code.MULTIPLE_STATEMENTS, tok.start)
        if kind in _CLAUSE_TOKENS:
            fail(f"{tok.text.upper()} is not allowed in a program", _CLAUSE_TOKENS[kind], tok.start)
        if kind in _FORBIDDEN_TOKENS:
            fail(f"{_FORBIDDEN_TOKENS[kind]} are not allowed", Code.FORBIDDEN_SYNTAX, tok.start)
        if kind == TokenType.STRING and len(tok.text) > limits.max_literal_chars:
            fail(
                f"string literal of {len(tok.text)} characters; at most {limits.max_literal_chars}",
                Code.LITERAL_TOO_LONG,
                tok.start,
            )
        if kind == TokenType.L_PAREN:
            depth += 1
            if depth > limits.max_depth:
                fail(f"parentheses nest deeper than {limits.max_depth}", Code.TOO_DEEP, tok.start)
        elif kind == TokenType.R_PAREN:
            depth -= 1
    runnable.check_tokens(tokens)


def check_operands(tokens: list[Token], sites: tuple[PlaceholderToken, ...]) -> None:
    """Refuse an operator or list separator with nothing after it, which sqlglot would silently drop."""
    brackets = {s.position for s in sites}
    # The '>' closing a placeholder is two tokens after its '<'.
    closing = {tokens[i + 2].start for i, t in enumerate(tokens[:-2]) if t.start in brackets}
    for before, after in zip(tokens, [*tokens[1:], None], strict=True):
        if before.token_type not in _NEEDS_OPERAND or before.start in brackets or before.start in closing:
            continue
        if after is None or after.token_type in _OPERAND_MISSING:
            # ``f()`` is a call with no arguments, not a missing operand.
            if (
                before.token_type == TokenType.L_PAREN
                and after is not None
                and after.token_type == TokenType.R_PAREN
            ):
                continue
            where = after.start if after is not None else before.end + 1
            fail(f"an operand is missing after {before.text!r}", Code.SQL_SYNTAX, where)


def _offset(sql: str, line: int, col: int) -> int:
    lines = sql.split("\n")
    before = sum(len(text) + 1 for text in lines[: max(line - 1, 0)])
    return max(0, min(len(sql), before + col - 1))


def parse(sql: str) -> exp.Expr:
    """The one statement of ``sql`` (placeholders already marked), or a typed syntax error with its offset."""
    try:
        statements = sqlglot.parse(sql, dialect=DIALECT)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col = first.get("line"), first.get("col")
        where = _offset(sql, line, col) if isinstance(line, int) and isinstance(col, int) else None
        description = _CLASS_REPR.sub(r"\1", str(first.get("description") or exc))
        description = _MISSING_ARG.sub(lambda m: f"{m.group(1).upper()} is missing an operand", description)
        fail(f"SQL does not parse: {description}", Code.SQL_SYNTAX, where)
    except RecursionError:
        fail("SQL nests too deeply to parse", Code.TOO_DEEP)
    except Exception as exc:  # sqlglot may fail in other ways on hostile text; all mean "not SQL we accept"
        fail(f"SQL does not parse: {type(exc).__name__}", Code.SQL_SYNTAX)
    real = [s for s in statements if s is not None]
    if len(real) != 1:
        fail(f"a program's SQL is exactly one statement, found {len(real)}", Code.MULTIPLE_STATEMENTS)
    return real[0]


def check_text_and_tokens(sql: str, limits: DslLimits = DEFAULT_LIMITS) -> list[Token]:
    """Stages 1 and 2 of the module docstring, without the placeholder-aware operand check
    (:func:`check_operands`, which needs the placeholders' sites); returns the tokens."""
    if len(sql) > limits.max_sql_chars:
        fail(f"SQL has {len(sql)} characters; at most {limits.max_sql_chars}", Code.SQL_TOO_LONG)
    _check_characters(sql)
    tokens = tokenize(sql)
    _check_tokens(sql, tokens, limits)
    return tokens
