"""A JSON Schema of the program language for one corpus: structured output for a served planner.

Constrained decoding with this schema makes every served completion a well-shaped program (``S_f`` = 1):
the exact keys, entry types, the corpus's fields per modality, the modes and the ladders. The SQL itself
is a bounded string; its rules are :func:`serving.dsl.validate`'s.

>>> from indexing.schema import EMAILS
>>> schema = program_json_schema(EMAILS)
>>> schema["properties"]["retrieval_list"]["items"]["properties"]["field"]["enum"]
['subject', 'body']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from indexing.schema import CorpusSchema
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.parse import ENTRY_REQUIRED, PROGRAM_KEYS
from serving.dsl.program import MODES, ROLE_OF, corpus_modalities


def _entry_schema(modality: str, fields: tuple[str, ...], limits: DslLimits) -> dict[str, object]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(ENTRY_REQUIRED),
        "properties": {
            "type": {"type": "string", "const": modality},
            "field": {"type": "string", "enum": list(fields)},
            "query": {"type": "string", "minLength": 1, "maxLength": limits.max_query_chars},
            "mode": {"type": "string", "enum": list(MODES)},
            "k": {"type": "integer", "enum": list(limits.k_ladder)},
            "rerank": {"type": "integer", "enum": list(limits.rerank_ladder)},
        },
    }


def program_json_schema(schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of a program over ``schema``'s corpus.

    ``rerank <= k`` and placeholder use are not expressible here; :func:`serving.dsl.validate` checks them.
    """
    variants = [_entry_schema(m, schema.names(ROLE_OF[m]), limits) for m in corpus_modalities(schema)]
    items: dict[str, object] = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"ProRetrieval program over {schema.table}",
        "type": "object",
        "additionalProperties": False,
        "required": list(PROGRAM_KEYS),
        "properties": {
            "sql": {"type": "string", "minLength": 1, "maxLength": limits.max_sql_chars},
            "retrieval_list": {"type": "array", "maxItems": limits.max_entries, "items": items},
        },
    }


SEPARATORS = (", ", ": ")
"""The separators of a program's JSON as the project writes it (``json.dumps``' defaults: the benchmarks'
gold programs, hence what a trained planner writes)."""


def longest_instance(node: Mapping[str, Any]) -> Any:
    """The longest value ``node`` (a schema :func:`program_json_schema` writes) admits, once written as
    JSON with ASCII strings that need no escape: every string at its ``maxLength`` (or its longest
    ``enum``/``const``), every array at ``maxItems`` copies of its longest item, every property present.

    Its length bounds the tokens of any structured completion of such strings (a byte-level BPE token is at
    least one byte), so it is the generation budget that lets constrained decoding always close the program.

    >>> from indexing.schema import EMAILS
    >>> json.dumps(longest_instance(program_json_schema(EMAILS)))[:13]
    '{"sql": "xxxx'
    """
    if "anyOf" in node:
        return max((longest_instance(v) for v in node["anyOf"]), key=lambda v: len(json.dumps(v)))
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    kind = node.get("type")
    if kind == "object":
        return {name: longest_instance(sub) for name, sub in node.get("properties", {}).items()}
    if kind == "array":
        return [longest_instance(node["items"])] * int(node["maxItems"])
    if kind == "string":
        return "x" * int(node["maxLength"])
    raise ValueError(f"no longest value for the schema node {node!r}")


def longest_program_chars(schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS,
                          separators: tuple[str, str] = SEPARATORS) -> int:  # fmt: skip
    """Characters of the longest program :func:`program_json_schema` admits, written with ``separators``
    and no other whitespace (ASCII strings, no escapes)."""
    return len(json.dumps(longest_instance(program_json_schema(schema, limits)), separators=separators))
