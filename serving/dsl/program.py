"""The typed program: a SQL text and a list of retrieval entries (DESIGN.md section 3).

A :class:`Program` is only well-typed; :func:`serving.dsl.validate` says whether it follows the rules.

>>> p = Program("SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", "quiet"),))
>>> p.to_json()
'{"sql": "SELECT id FROM products WHERE id IN <text_1>", "retrieval_list": [{"type": "text", "field": "review", "query": "quiet"}]}'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, get_args

from indexing.schema import CorpusSchema, Role
from serving.dsl.limits import DEFAULT_LIMITS

Modality = Literal["text", "image"]
Mode = Literal["dense", "sparse", "fuse"]

MODALITIES: tuple[Modality, ...] = get_args(Modality)
"""Entry types; the placeholder ``<text_k>`` / ``<image_k>`` names its entry's type."""


def placeholder_name(modality: str, index: int) -> str:
    """The name inside the placeholder of modality ``modality`` naming entry ``index`` (0-based): ``text_1``
    for ("text", 0). It names that placeholder's column in a checked tree, its query parameter once bound, and
    the entry's candidates (:func:`serving.engine.results.candidate_name`); the one place a name is built."""
    return f"{modality}_{index + 1}"


def placeholder_of(modality: str, index: int) -> str:
    """The placeholder of modality ``modality`` naming entry ``index`` (0-based): ``<text_1>`` for ("text", 0)."""
    return f"<{placeholder_name(modality, index)}>"


ROLE_OF: dict[str, Role] = {"text": Role.TEXT, "image": Role.IMAGE}
"""The schema role of the fields an entry of each modality searches."""


def corpus_modalities(schema: CorpusSchema) -> tuple[Modality, ...]:
    """The entry modalities ``schema``'s corpus has fields for, in :data:`MODALITIES` order.

    >>> from indexing.schema import EMAILS, PRODUCTS
    >>> corpus_modalities(PRODUCTS), corpus_modalities(EMAILS)
    (('text', 'image'), ('text',))
    """
    return tuple(m for m in MODALITIES if schema.names(ROLE_OF[m]))


MODES: tuple[Mode, ...] = get_args(Mode)
"""Retrieval modes (DESIGN.md section 3): ``sparse`` is BM25, ``fuse`` is RRF of dense and sparse."""


@dataclass(frozen=True)
class Retrieval:
    """One semantic request: search ``field`` for ``query`` and keep the top ``k`` ids.

    ``mode``, ``k`` and ``rerank`` are the RPL extensions; their defaults mean what the paper's entries mean.
    """

    type: Modality
    field: str
    query: str
    mode: Mode = "dense"
    k: int = DEFAULT_LIMITS.default_k
    rerank: int = 0

    def to_dict(self, *, explicit: bool = False) -> dict[str, object]:
        """The JSON object of the entry; RPL fields at their defaults are left out unless ``explicit``."""
        out: dict[str, object] = {"type": self.type, "field": self.field, "query": self.query}
        if explicit or self.mode != "dense":
            out["mode"] = self.mode
        if explicit or self.k != DEFAULT_LIMITS.default_k:
            out["k"] = self.k
        if explicit or self.rerank != 0:
            out["rerank"] = self.rerank
        return out


@dataclass(frozen=True)
class Program:
    """A retrieval program: ``sql`` with placeholders ``<text_k>`` / ``<image_k>`` naming ``retrieval_list`` entries."""

    sql: str
    retrieval_list: tuple[Retrieval, ...] = ()

    def to_dict(self, *, explicit: bool = False) -> dict[str, object]:
        """The JSON object of the program (see :meth:`Retrieval.to_dict` for ``explicit``)."""
        return {
            "sql": self.sql,
            "retrieval_list": [r.to_dict(explicit=explicit) for r in self.retrieval_list],
        }

    def to_json(self, *, explicit: bool = False) -> str:
        """The program as one line of JSON, the form a planner writes and :func:`parse_program` reads."""
        return json.dumps(self.to_dict(explicit=explicit), ensure_ascii=False)

    @staticmethod
    def placeholder(index: int, entry: Retrieval) -> str:
        """The placeholder naming entry ``index`` (0-based) of the list: ``<text_1>`` for index 0."""
        return placeholder_of(entry.type, index)
