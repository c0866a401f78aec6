"""The program language (DSL v1, DESIGN.md sections 3 and 6): typed programs and pure passes over them.

``parse_program`` / ``extract_program`` read a program (``FormatError`` if it is none), ``validate`` checks it
against a corpus schema (``ValidationError``), ``substitute`` and ``strip_retrievals`` render ClickHouse SQL.

>>> from indexing.schema import PRODUCTS
>>> v = validate(parse_program({"sql": "SELECT id FROM products WHERE brand = 'Levi''s' AND id IN <text_1>",
...     "retrieval_list": [{"type": "text", "field": "title", "query": "slim jeans"}]}), PRODUCTS)
>>> substitute(v, {0: ["P00042"]}, table="products_v1")
"SELECT id FROM products_v1 AS products WHERE brand = 'Levi''s' AND id IN ('P00042')"
"""

from serving.dsl.errors import Code, DslError, FormatError, ValidationError
from serving.dsl.json_schema import longest_program_chars, program_json_schema
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.parse import extract_program, parse_program
from serving.dsl.placeholders import PlaceholderUse
from serving.dsl.program import Program, Retrieval
from serving.dsl.substitute import strip_retrievals, substitute
from serving.dsl.validate import ValidatedProgram, validate

__all__ = [
    "DEFAULT_LIMITS",
    "Code",
    "DslError",
    "DslLimits",
    "FormatError",
    "PlaceholderUse",
    "Program",
    "Retrieval",
    "ValidatedProgram",
    "ValidationError",
    "extract_program",
    "longest_program_chars",
    "parse_program",
    "program_json_schema",
    "strip_retrievals",
    "substitute",
    "validate",
]
