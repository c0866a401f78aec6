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
from serving.dsl.shape import PROGRAM, Key, ObjectShape, Scope


def _object_schema(shape: ObjectShape, scope: Scope) -> dict[str, object]:
    """The schema of an object of ``shape``; a shape with variants (an entry: one per modality of the corpus)
    is one object schema per variant, its variant key a ``const``."""
    scopes = shape.variants(scope)
    if len(scopes) > 1:
        return {"anyOf": [_object_schema(shape, one) for one in scopes]}
    scope = scopes[0]
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(shape.required),
        "properties": {key.name: _value_schema(key, scope, key.name == shape.variant) for key in shape.keys},
    }


def _value_schema(key: Key, scope: Scope, variant: bool) -> dict[str, object]:
    node: dict[str, object] = {"type": key.json_type}
    if key.items is not None:
        assert key.max_items is not None, f"array {key.name!r} declares no maxItems"
        node["maxItems"] = key.max_items(scope.limits)
        node["items"] = _object_schema(key.items, scope)
    choices = key.choices(scope)
    if variant and choices:
        node["const"] = choices[0]
    elif choices is not None:
        node["enum"] = list(choices)
    if key.max_chars is not None:
        node["minLength"] = 1
        node["maxLength"] = key.max_chars(scope.limits)
    return node


def program_json_schema(schema: CorpusSchema, limits: DslLimits = DEFAULT_LIMITS) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of a program over ``schema``'s corpus, written from the declared shape
    (:data:`serving.dsl.shape.PROGRAM`).

    ``rerank <= k`` and placeholder use are not expressible here; :func:`serving.dsl.validate` checks them.
    """
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"ProRetrieval program over {schema.table}",
        **_object_schema(PROGRAM, Scope(limits, schema)),
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
