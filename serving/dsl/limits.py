"""Every constant of the program language, in one frozen dataclass.

The ladders and the RRF constant come from DESIGN.md section 3; the caps from section 6 ("Bounds").
Nothing else in the package writes a number that a program is checked against.

>>> DEFAULT_LIMITS.k_ladder, DEFAULT_LIMITS.default_k
((3, 5, 10, 20, 50), 20)
>>> DEFAULT_LIMITS.rerank_ladder
(0, 3, 5, 10, 20)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DslLimits:
    """Ladders, defaults and caps that a program is checked against (DESIGN.md sections 3 and 6)."""

    k_ladder: tuple[int, ...] = (3, 5, 10, 20, 50)
    """Allowed widths ``k`` of a retrieval entry (DESIGN.md section 3, RPL extensions)."""

    default_k: int = 20
    """Width of an entry that names none: the paper's K (DESIGN.md section 3)."""

    rerank_ladder: tuple[int, ...] = (0, 3, 5, 10, 20)
    """Allowed ``rerank`` depths; 0 means no reranking (DESIGN.md section 3). ``rerank <= k``."""

    rrf_constant: int = 60
    """The constant of reciprocal-rank fusion, both in ``fuse`` and in the ranking contract (DESIGN.md section 3)."""

    max_entries: int = 8
    """Most entries in ``retrieval_list``; the paper's hardest level has 5 leaf conditions (DESIGN.md section 4)."""

    max_query_chars: int = 256
    """Longest ``query`` phrase of an entry: "a non-empty phrase with a bounded length" (DESIGN.md section 3)."""

    max_sql_chars: int = 4000
    """Longest SQL text; bounds the work of lexing and parsing an untrusted program (DESIGN.md section 6)."""

    max_program_chars: int = 16_384
    """Longest program source (the whole JSON object), checked before decoding it (DESIGN.md section 6)."""

    max_json_depth: int = 4
    """Deepest JSON nesting a program may use; a program needs 3 (object, list, entry) (DESIGN.md section 6)."""

    max_depth: int = 48
    """Deepest SQL syntax tree, and deepest parenthesis nesting seen by the lexer (DESIGN.md section 6)."""

    max_nodes: int = 600
    """Most nodes in the SQL syntax tree (DESIGN.md section 6)."""

    max_literal_chars: int = 200
    """Longest string literal in the SQL (DESIGN.md section 6)."""

    max_in_list: int = 64
    """Most literal items in one ``IN (...)`` list (DESIGN.md section 6)."""

    max_limit: int = 1000
    """Largest ``LIMIT`` or ``OFFSET`` a program may write; execution limits cap result rows again (DESIGN.md section 6)."""


DEFAULT_LIMITS = DslLimits()
