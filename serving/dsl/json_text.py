"""Where the strings of a JSON text are, without decoding it: the one scanner of JSON text in the project.

Two readers need to know it before (or instead of) decoding: the parser, which bounds the nesting of a program
before the recursive decoder sees it (:mod:`serving.dsl.parse`), and the planner's repair of a near-miss
completion, which escapes raw control characters inside strings (:mod:`serving.planner`).

>>> text = '{"a": "x\\\\"[", "b": [1]}'
>>> [(text[start:end], where) for start, end, where in json_runs(text)][:4]
[('{', 'code'), ('"a"', 'string'), (': ', 'code'), ('"x\\\\"["', 'string')]
>>> [(text[start:end], where) for start, end, where in json_runs(text, split_strings=True)][5:9]
[('"', 'quoting'), ('x', 'text'), ('\\\\"', 'quoting'), ('[', 'text')]
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

Where = Literal["code", "string", "text", "quoting"]
"""``code``: outside any string; ``string``: a whole string literal, its quotes included. Split, a string is
``text`` (its own characters) and ``quoting`` (its quotes, and an escape's backslash with the character it
escapes)."""

_RUN = re.compile(r'[^"]+|"[^"\\]*(?:\\.?[^"\\]*)*"?', re.DOTALL)
"""A run outside strings, or a string: a quote, characters and escapes, the closing quote unless the text ends."""
_PIECE = re.compile(r'[^"\\]+|\\.?|"', re.DOTALL)
"""A piece of a string: its own characters, an escape, or a quote."""


def json_runs(text: str, *, split_strings: bool = False) -> Iterator[tuple[int, int, Where]]:
    """The runs of ``text`` as a JSON reader sees them, in order and covering it: ``(start, end, where)``.

    A quote outside a string opens one; inside, a backslash escapes the next character and a quote closes it.
    A string left open runs to the end of the text. Nothing else is checked: the text need not be JSON. With
    ``split_strings`` each string comes in pieces, ``text`` and ``quoting``, instead of one ``string`` run.
    """
    for run in _RUN.finditer(text):
        start, end = run.span()
        if text[start] != '"':
            yield start, end, "code"
        elif not split_strings:
            yield start, end, "string"
        else:
            for piece in _PIECE.finditer(text, start, end):
                yield piece.start(), piece.end(), "quoting" if piece.group()[0] in '"\\' else "text"
