"""Whose fault a failed ClickHouse statement is, by ClickHouse's own error code.

Three lists decide it: :data:`STATEMENT_FAULTS` (the statement's own text: run it again and it fails
again), :data:`LIMIT_FAULTS` (among those, a cap the statement ran into) and :data:`STORE_FAULTS`
(never the statement's doing). :func:`sql_error` turns a store's exception into the typed error that
says so. A code of no list is *unclassified*; the engine, which runs untrusted statements in batches,
resolves it itself (:mod:`serving.engine.sqlrun`), so the lists guide but do not bound what a program
can break.
"""

from __future__ import annotations

import re

from indexing.errors import QueryRejected, StoreError, StoreFailure

LIMIT_FAULTS: frozenset[int] = frozenset(
    {
        158,  # TOO_MANY_ROWS (max_rows_to_read)
        159,  # TIMEOUT_EXCEEDED (max_execution_time)
        160,  # TOO_SLOW
        161,  # TOO_MANY_COLUMNS
        162,  # TOO_DEEP_SUBQUERIES
        165,  # TOO_MANY_TEMPORARY_COLUMNS
        166,  # TOO_MANY_TEMPORARY_NON_CONST_COLUMNS
        167,  # TOO_DEEP_AST
        168,  # TOO_BIG_AST
        191,  # SET_SIZE_LIMIT_EXCEEDED
        241,  # MEMORY_LIMIT_EXCEEDED (max_memory_usage; the server's total limit is not the query's)
        290,  # LIMIT_EXCEEDED
        306,  # TOO_DEEP_RECURSION
        307,  # TOO_MANY_BYTES
        396,  # TOO_MANY_ROWS_OR_BYTES (max_result_rows)
    }
)
"""ClickHouse error codes of a statement stopped by a cap it runs under."""

STATEMENT_FAULTS: frozenset[int] = LIMIT_FAULTS | frozenset(
    {
        6, 25, 26, 27, 32, 38, 41, 72, 130, 376, 441, 467,  # CANNOT_PARSE_* / CANNOT_READ_* (text,
        # escapes, quoted string, assertion, end of input, date, datetime, number, array, UUID, domain
        # value, bool) in a literal or a cast
        1, 48, 344,  # UNSUPPORTED_METHOD, NOT_IMPLEMENTED, SUPPORT_IS_DISABLED (a construct this engine lacks)
        7, 13, 20, 51,  # INCORRECT_NUMBER_OF_COLUMNS, SIZES_OF_COLUMNS_IN_TUPLE_DOESNT_MATCH,
        # NUMBER_OF_COLUMNS_DOESNT_MATCH (id IN (SELECT id, brand ...)), EMPTY_LIST_OF_COLUMNS_QUERIED
        11, 12, 69, 353,  # POSITION_OUT_OF_BOUND, PARAMETER_OUT_OF_BOUND, ARGUMENT_OUT_OF_BOUND,
        # INDEX_OF_POSITIONAL_ARGUMENT_IS_OUT_OF_RANGE
        34, 35, 42,  # TOO_MANY_/TOO_FEW_ARGUMENTS_FOR_FUNCTION, NUMBER_OF_ARGUMENTS_DOESNT_MATCH
        36,  # BAD_ARGUMENTS (e.g. an unknown date unit)
        43, 44, 59,  # ILLEGAL_TYPE_OF_ARGUMENT, ILLEGAL_COLUMN, ILLEGAL_TYPE_OF_COLUMN_FOR_FILTER (WHERE 'x')
        46, 63,  # UNKNOWN_FUNCTION, UNKNOWN_AGGREGATE_FUNCTION
        47, 16,  # UNKNOWN_IDENTIFIER, NO_SUCH_COLUMN_IN_TABLE
        50, 377, 378,  # UNKNOWN_TYPE, ILLEGAL_SYNTAX_FOR_DATA_TYPE, DATA_TYPE_CANNOT_HAVE_ARGUMENTS
        53, 70, 386,  # TYPE_MISMATCH, CANNOT_CONVERT_TYPE, NO_COMMON_TYPE
        62,  # SYNTAX_ERROR (also a statement longer than max_query_size)
        80, 183,  # INCORRECT_QUERY, UNEXPECTED_EXPRESSION
        124,  # INCORRECT_ELEMENT_OF_SET
        125,  # INCORRECT_RESULT_OF_SCALAR_SUBQUERY
        128, 131,  # TOO_LARGE_ARRAY_SIZE, TOO_LARGE_STRING_SIZE
        133, 134, 309,  # parameters of aggregate functions
        135,  # ZERO_ARRAY_OR_TUPLE_INDEX
        152,  # UNKNOWN_DIRECTION_OF_SORTING
        153,  # ILLEGAL_DIVISION
        169, 170,  # BAD_TYPE_OF_FIELD, BAD_GET
        174, 179,  # CYCLIC_ALIASES, MULTIPLE_EXPRESSIONS_FOR_ALIAS
        184, 215,  # ILLEGAL_AGGREGATION, NOT_AN_AGGREGATE
        207, 352,  # AMBIGUOUS_IDENTIFIER, AMBIGUOUS_COLUMN_NAME
        321, 407,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE, DECIMAL_OVERFLOW
        395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
        190,  # SIZES_OF_ARRAYS_DONT_MATCH
        406,  # TOP_AND_LIMIT_TOGETHER
        427,  # CANNOT_COMPILE_REGEXP
        440,  # INVALID_LIMIT_EXPRESSION
        446, 721,  # FUNCTION_NOT_ALLOWED, DEPRECATED_FUNCTION
        490,  # CANNOT_FORMAT_DATETIME
        503,  # AGGREGATE_FUNCTION_THROW
        527,  # NO_SUITABLE_FUNCTION_IMPLEMENTATION
        552, 703, 728,  # UNRECOGNIZED_ARGUMENTS, INVALID_IDENTIFIER, UNEXPECTED_DATA_TYPE
    }
)  # fmt: skip
"""ClickHouse error codes that are the statement's own fault: run again, it fails again.

:func:`sql_error` makes them a :class:`~indexing.errors.QueryRejected`. A code in neither this list nor
:data:`STORE_FAULTS` (``LOGICAL_ERROR``, a code a later ClickHouse adds) is *unclassified*: a retryable
:class:`~indexing.errors.StoreFailure` marked ``unclassified``, which the engine resolves itself by running
the statement alone beside a statement it knows to be good."""

STORE_FAULTS: frozenset[int] = frozenset(
    {
        60, 81,  # UNKNOWN_TABLE, UNKNOWN_DATABASE: the index's table is the project's, never a program's
        74, 75, 76, 107, 226, 243, 246,  # file descriptors, files, free space, corrupted parts
        173,  # CANNOT_ALLOCATE_MEMORY
        202, 439, 700, 749, 762,  # too many simultaneous queries, tasks, sessions or connections
        209, 210, 279, 285,  # SOCKET_TIMEOUT, NETWORK_ERROR, ALL_CONNECTION_TRIES_FAILED, TOO_FEW_LIVE_REPLICAS
        236, 394, 735,  # ABORTED, QUERY_WAS_CANCELLED, QUERY_WAS_CANCELLED_BY_CLIENT
        425, 999,  # SYSTEM_ERROR, KEEPER_EXCEPTION
        497, 516,  # ACCESS_DENIED, AUTHENTICATION_FAILED
    }
)  # fmt: skip
"""ClickHouse error codes that are never the statement's doing: a table that vanished, the server's
resources or connections, a cancelled query. With the server's total memory (code 241 marked
``(total)``) they fail the whole call at once, however many programs it carries."""

_READONLY = 164
_CODE = re.compile(r"\bCode:\s*(\d+)", re.IGNORECASE)
_NAME = re.compile(r"\(([A-Z][A-Z0-9_]{3,})\)")


def sql_error(exc: BaseException) -> StoreError:
    """A typed error for a failed statement.

    :class:`~indexing.errors.QueryRejected` (code ``sql_limit`` for a cap, ``sql`` for the rest) when the
    statement is at fault (:data:`STATEMENT_FAULTS`); a plain ``sql_readonly`` :class:`StoreError` for a
    write refused by ``readonly``; :class:`~indexing.errors.StoreFailure` (retryable) for anything else,
    marked ``unclassified`` when ClickHouse gave a code of neither list (nor the server's total memory).
    """
    text = str(exc)
    found = _CODE.search(text)
    number = int(found.group(1)) if found else None
    line = first_line(exc)
    if found is not None and "Code:" not in line:
        # clickhouse-connect puts its own sentence first and ClickHouse's message after it.
        line = " ".join(text[found.start() :].split())[:500]
    total = number == 241 and "(total)" in text  # the server as a whole is out of memory: not the statement's
    if number in STATEMENT_FAULTS and not total:
        code = "sql_limit" if number in LIMIT_FAULTS else "sql"
        return QueryRejected(f"ClickHouse: {line}", code=code, number=number)
    if number == _READONLY:
        return StoreError(f"ClickHouse: {line}", code="sql_readonly")
    names = _NAME.findall(text)
    what = names[-1] if names else (str(number) if number is not None else type(exc).__name__)
    unclassified = number is not None and number not in STORE_FAULTS and not total
    return StoreFailure(f"ClickHouse failed ({what}): {line}", number=number, unclassified=unclassified)


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text (its type's name when it has none), at most 500 characters."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
