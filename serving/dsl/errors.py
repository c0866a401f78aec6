"""Errors of the program language: one root, two kinds, and every code listed once in :class:`Code`.

A :class:`FormatError` means the text is not a program at all (the reward's ``S_f`` is 0). A
:class:`ValidationError` means it is a program that breaks a rule (``S_f`` is 1, ``S_e`` is 0). Both
carry a stable ``code`` and where the problem is: ``position`` is a character offset in the SQL,
``path`` names the part of the program (``sql``, ``retrieval_list[1].field``, ...).

>>> err = ValidationError("no such column 'colour'", code=Code.UNKNOWN_COLUMN, path="sql", position=30)
>>> err.one_line()
"error unknown_column: no such column 'colour' (at sql:30)"
"""

from __future__ import annotations

from enum import StrEnum

from core.errors import ProReError


class Code(StrEnum):
    """Every stable error code of the program language."""

    # Not a program (FormatError).
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    SURROUNDING_TEXT = "surrounding_text"
    PROGRAM_TOO_LARGE = "program_too_large"
    JSON_TOO_DEEP = "json_too_deep"
    DUPLICATE_KEY = "duplicate_key"
    BAD_NUMBER = "bad_number"
    MISSING_KEY = "missing_key"
    UNKNOWN_KEY = "unknown_key"
    BAD_VALUE_TYPE = "bad_value_type"
    BAD_TYPE = "bad_type"
    BAD_MODE = "bad_mode"

    # SQL text and statement shape (ValidationError).
    SQL_TOO_LONG = "sql_too_long"
    SQL_SYNTAX = "sql_syntax"
    BAD_CHARACTER = "bad_character"
    COMMENT = "comment"
    MULTIPLE_STATEMENTS = "multiple_statements"
    RESERVED_IDENTIFIER = "reserved_identifier"
    BAD_PLACEHOLDER = "bad_placeholder"
    NOT_SELECT = "not_select"
    SET_OPERATION = "set_operation"
    WITH_CLAUSE = "with_clause"
    JOIN = "join"
    SETTINGS_CLAUSE = "settings_clause"
    FORMAT_CLAUSE = "format_clause"
    INTO_CLAUSE = "into_clause"
    FORBIDDEN_CLAUSE = "forbidden_clause"
    FORBIDDEN_SYNTAX = "forbidden_syntax"
    FORBIDDEN_FUNCTION = "forbidden_function"
    TABLE_FUNCTION = "table_function"
    FORBIDDEN_TABLE = "forbidden_table"
    UNKNOWN_TABLE = "unknown_table"
    MISSING_FROM = "missing_from"
    DERIVED_TABLE = "derived_table"
    STAR = "star"
    BAD_PROJECTION = "bad_projection"
    UNKNOWN_COLUMN = "unknown_column"
    ALIAS = "alias"
    MISPLACED_AGGREGATE = "misplaced_aggregate"
    BAD_LIMIT = "bad_limit"
    BAD_UNIT = "bad_unit"
    NOT_BOOLEAN = "not_boolean"
    ROUND_TRIP = "round_trip"

    # What sqlglot reads but ClickHouse never runs (ValidationError; serving.dsl.runnable).
    SUBQUERY_COLUMNS = "subquery_columns"
    CALL_CLAUSE = "call_clause"
    NUMBER_OUT_OF_RANGE = "number_out_of_range"
    BAD_INTERVAL = "bad_interval"
    BAD_DATE = "bad_date"

    # Caps (ValidationError).
    TOO_DEEP = "too_deep"
    TOO_MANY_NODES = "too_many_nodes"
    LITERAL_TOO_LONG = "literal_too_long"
    IN_LIST_TOO_LONG = "in_list_too_long"

    # Placeholders and entries (ValidationError).
    PLACEHOLDER_MISPLACED = "placeholder_misplaced"
    PLACEHOLDER_OUT_OF_RANGE = "placeholder_out_of_range"
    PLACEHOLDER_TYPE_MISMATCH = "placeholder_type_mismatch"
    UNUSED_ENTRY = "unused_entry"
    TOO_MANY_ENTRIES = "too_many_entries"
    UNKNOWN_FIELD = "unknown_field"
    BAD_FIELD = "bad_field"
    EMPTY_QUERY = "empty_query"
    QUERY_TOO_LONG = "query_too_long"
    BAD_QUERY = "bad_query"
    BAD_K = "bad_k"
    BAD_RERANK = "bad_rerank"
    RERANK_EXCEEDS_K = "rerank_exceeds_k"

    # Misuse of the passes by the calling code, not by a program (plain DslError).
    MISSING_ID_SET = "missing_id_set"
    BAD_PHYSICAL_TABLE = "bad_physical_table"


FORMAT_CODES: frozenset[Code] = frozenset(
    {
        Code.NOT_JSON,
        Code.NOT_OBJECT,
        Code.SURROUNDING_TEXT,
        Code.PROGRAM_TOO_LARGE,
        Code.JSON_TOO_DEEP,
        Code.DUPLICATE_KEY,
        Code.BAD_NUMBER,
        Code.MISSING_KEY,
        Code.UNKNOWN_KEY,
        Code.BAD_VALUE_TYPE,
        Code.BAD_TYPE,
        Code.BAD_MODE,
    }
)
"""Codes of :class:`FormatError`: the text is not a program of the language."""

CALLER_CODES: frozenset[Code] = frozenset({Code.MISSING_ID_SET, Code.BAD_PHYSICAL_TABLE})
"""Codes of plain :class:`DslError`: the calling code misused a pass."""

VALIDATION_CODES: frozenset[Code] = frozenset(Code) - FORMAT_CODES - CALLER_CODES
"""Codes of :class:`ValidationError`: a program that breaks a rule."""


class DslError(ProReError):
    """Root error of the program language: a ``code`` and where (``path``, ``position``)."""

    code = "dsl"
    allowed_codes: frozenset[Code] = CALLER_CODES

    def __init__(
        self, message: str, *, code: Code, path: str | None = None, position: int | None = None
    ) -> None:
        if code not in self.allowed_codes:
            # A code raised by the wrong kind would be scored wrongly by the reward.
            raise TypeError(f"{type(self).__name__} cannot carry code {code!r}")
        super().__init__(message, code=str(code), position=position)
        self.path = path

    @property
    def where(self) -> str | None:
        """``path:position``, ``path`` or ``None``: where the problem is, for people."""
        if self.path is not None and self.position is not None:
            return f"{self.path}:{self.position}"
        if self.path is not None:
            return self.path
        return None if self.position is None else str(self.position)

    def one_line(self) -> str:
        """The single line the CLI prints: ``error <code>: <message> (at <where>)``."""
        where = f" (at {self.where})" if self.where is not None else ""
        return f"error {self.code}: {' '.join(self.message.split())}{where}"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form, for API responses and the reward service."""
        return {
            "kind": type(self).__name__,
            "code": self.code,
            "message": self.message,
            "path": self.path,
            "position": self.position,
        }


class FormatError(DslError):
    """Not a program: bad JSON, a wrong shape, a value the language has no type for."""

    allowed_codes = FORMAT_CODES


class ValidationError(DslError):
    """A program that breaks a rule of the language or of its SQL allow-list."""

    allowed_codes = VALIDATION_CODES
