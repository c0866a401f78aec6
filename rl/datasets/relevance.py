"""Every instance's relevant set: each document that satisfies the request's whole condition tree.

The gold document is the one the gold program ranks first; but a request such as "strong bass" is
true of many documents, and a method that returns any of them has answered it. The relevant set
says which, from the corpus's label table (:mod:`indexing.corpora.labels`), not from any retrieval:

- a structured leaf holds exactly as its SQL predicate does on the corpus table (the same predicate
  the gold program runs, :func:`rl.datasets.compile.predicate`);
- a semantic leaf holds where the field carries the facet (a label row ``(doc, field, facet)``), a
  negated one where it does not;
- ``And``, ``Or`` and ``Not`` combine them as in the tree.

It is computed on ClickHouse, in bulk: the labels are loaded once into a table of the benchmark's
own (an in-memory table in the :data:`DATABASE` database, never the corpus table that programs query,
and dropped afterwards), and one scan of the corpus table, joined with it, answers a whole batch of
instances::

    SELECT countIf(c0) AS n0, groupArraySortedIf(1000)(id, c0) AS i0, countIf(c0 AND id = 'P00042') AS g0, ...
    FROM <corpus table> AS products LEFT JOIN prore_bench.labels_<run> AS bench_labels
      ON products.id = bench_labels.doc_id

Every literal is quoted by sqlglot, and the statement runs on the store's trusted path (the project's
own SQL, not a program's). The stored ids are the first :data:`~rl.datasets.store.RELEVANT_CAP` ids in id
order, with the gold document always among them.

>>> from rl.datasets.tree import And, Leaf, Not
>>> condition(And((Leaf("structured", "price", "<", (200,)), Not(Leaf("text", "review", "sim", ("x",), facet="headphones.bass")))))
"(price < 200 AND NOT (has(bench_labels.label_keys, 'review/headphones.bass')))"
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rl.datasets.compile import literal, predicate
from rl.datasets.errors import BenchError
from rl.datasets.store import RELEVANT_CAP
from rl.datasets.tree import And, Leaf, Node, Not, Or

DATABASE = "prore_bench"
"""Database of the benchmark's own tables (the label table); programs can never name it."""
ALIAS = "bench_labels"
RELEVANCE_BATCH = 64
"""Instances answered by one scan (three aggregates each)."""


@dataclass(frozen=True)
class RelevantSet:
    """The documents that satisfy one instance's request."""

    n: int
    """How many there are."""
    ids: tuple[str, ...]
    """Their ids in id order, at most the cap; the gold always among them when it is relevant."""
    capped: bool
    """Whether the cap cut ``ids``."""
    has_gold: bool
    """Whether the gold document is relevant (it always must be; a ``False`` is a synthesis fault)."""


def label_key(field: str, facet: str) -> str:
    """One label as the benchmark's table stores it: ``<field>/<facet>`` (a field name holds no ``/``)."""
    return f"{field}/{facet}"


def condition(node: Node) -> str:
    """The tree as a ClickHouse condition over the corpus table joined with the label table."""
    if isinstance(node, Leaf):
        if not node.semantic:
            return predicate(node)
        if node.facet is None:
            raise BenchError(f"semantic leaf on {node.field} has no facet", code="bench_relevance")
        return f"has({ALIAS}.label_keys, {literal(label_key(node.field, node.facet))})"
    if isinstance(node, Not):
        return f"NOT ({condition(node.child)})"
    word = " AND " if isinstance(node, And) else " OR "
    assert isinstance(node, And | Or)
    return "(" + word.join(condition(c) for c in node.children) + ")"


def _key_table(labels: pa.Table) -> pa.Table:
    """One row per labeled document: ``doc_id`` and its ``label_keys``."""
    keys = pc.binary_join_element_wise(labels.column("field"), labels.column("facet"), "/")
    flat = pa.table({"doc_id": labels.column("doc_id"), "key": keys})
    grouped = flat.group_by("doc_id").aggregate([("key", "list")])
    return pa.table({"doc_id": grouped.column("doc_id"), "label_keys": grouped.column("key_list")})


class RelevanceJudge:
    """Relevant sets of instances over one index's corpus table, with the corpus's labels loaded.

    ``store`` is the index's ClickHouse store (``IndexHandle.sql``), ``table`` its physical corpus
    table and ``alias`` the corpus table's name as programs write it. Use as a context manager, or
    :meth:`close` it: that drops the label table.
    """

    def __init__(
        self, store: Any, table: str, alias: str, labels: pa.Table, *, cap: int = RELEVANT_CAP
    ) -> None:
        self.store, self.table, self.alias, self.cap = store, table, alias, cap
        self.name = f"{DATABASE}.labels_{uuid.uuid4().hex[:12]}"
        self.scans = 0
        """Scans of the corpus table so far."""
        store.ensure_database(DATABASE)
        store.command(f"CREATE TABLE {self.name} (doc_id String, label_keys Array(String)) ENGINE = Memory")
        try:
            store.insert_arrow(self.name, _key_table(labels))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RelevanceJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the label table; twice is harmless."""
        self.store.drop_table(self.name)

    def statement(self, items: Sequence[tuple[Node, str]]) -> str:
        """The one-scan statement answering ``items`` (tree, gold id)."""
        columns = []
        for j, (tree, gold) in enumerate(items):
            c = condition(tree)
            columns += [
                f"countIf({c}) AS n{j}",
                f"groupArraySortedIf({self.cap})({self.alias}.id, {c}) AS i{j}",
                f"countIf({c} AND {self.alias}.id = {literal(gold)}) AS g{j}",
            ]
        return (
            f"SELECT {', '.join(columns)} FROM {self.table} AS {self.alias} "
            f"LEFT JOIN {self.name} AS {ALIAS} ON {self.alias}.id = {ALIAS}.doc_id"
        )

    def relevant_sets(
        self, items: Sequence[tuple[Node, str]], *, batch: int = RELEVANCE_BATCH
    ) -> list[RelevantSet]:
        """The relevant set of each (condition tree, gold id), in order: one scan per ``batch`` items."""
        out: list[RelevantSet] = []
        for start in range(0, len(items), max(batch, 1)):
            chunk = items[start : start + batch]
            # The project's own statement over its own tables: the store's trusted path, no program limits.
            row = self.store._trusted(self.statement(chunk))[0]
            self.scans += 1
            for j, (_, gold) in enumerate(chunk):
                n, ids, g = int(row[3 * j]), [str(i) for i in row[3 * j + 1]], int(row[3 * j + 2])
                if g and gold not in ids:
                    ids = sorted([*ids[: self.cap - 1], gold])
                out.append(RelevantSet(n=n, ids=tuple(ids), capped=n > len(ids), has_gold=g > 0))
        return out
