"""Where ``bench/scale.py``'s answer quality goes as the corpus grows: its P@1 and empty share broken down.

``bench/scale.py`` runs one benchmark, synthesized on the smallest corpus, unchanged at every size. This
module records, per program and candidate engine, what came back (:func:`record`), and breaks the result
down (:func:`breakdown`) by what a program is:

* ``level``: L1 / L2 / L3;
* ``modality``: the modalities of its conditions (``structured+text``, ``text``, ...);
* ``kind``: ``pure-vector`` (every condition is a vector search) or ``mixed`` (at least one SQL condition);
* ``searches``: how many vector searches it intersects or unites (its retrieval list's length);
* ``relevant``: how many documents satisfied it on the corpus it was synthesized on (1, 2-5, 6-20, 21-100,
  more): a rare request has less room at a larger size;
* ``outcome``: ``empty`` (nothing came back, or the program failed) or ``answered``.

For a pure-vector L1 request whose first result does not satisfy it (:func:`classify_miss`), the first
result is one of:

* ``tie``: it scores what the gold document scores (the order between them is the id tie-break);
* ``near-duplicate``: its searched field reads like the gold document's (token Jaccard >= 0.8);
* ``lexical neighbour``: it shares the phrase's words, not the facet the phrase stands for;
* ``tie beyond K``: the gold document is not among the K candidates, yet its similarity to the phrase is the
  K-th candidate's or more: the cut at K fell among equal scores (the hashing embedder gives every document
  with the same words the same vector) or the approximate (HNSW) search missed it;
* ``ranked below K``: the gold document is not among the K candidates and K others are more similar to the
  phrase: the embedder ranks it lower at this size;
* ``gold outside K``: not among the candidates, for a search this break-down cannot score (BM25).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

RELEVANT_BUCKETS = ((1, 1, "1"), (2, 5, "2-5"), (6, 20, "6-20"), (21, 100, "21-100"), (101, None, ">100"))
"""Relevant-set sizes at synthesis, grouped: (low, high or None, label)."""
DIMENSIONS = ("level", "modality", "kind", "searches", "relevant", "outcome")
"""The dimensions of :func:`breakdown`, in report order."""
NEAR_DUPLICATE = 0.8
"""Token Jaccard of the searched field from which a wrong first result counts as a near-duplicate."""


def _leaves(tree: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "leaf" in tree:
        return [tree]
    for key in ("not", "and", "or"):
        if key in tree:
            children = tree[key] if key != "not" else [tree[key]]
            return [leaf for child in children for leaf in _leaves(child)]
    return []


def relevant_bucket(n: int | None) -> str:
    """The :data:`RELEVANT_BUCKETS` label of a relevant-set size (``unknown`` without one)."""
    if n is None:
        return "unknown"
    for low, high, label in RELEVANT_BUCKETS:
        if n >= low and (high is None or n <= high):
            return label
    return "0"


def traits(instance: Any) -> dict[str, Any]:
    """What a benchmark instance is, along :data:`DIMENSIONS` (all but ``outcome``), plus its gold id and
    the searched field and phrase of its first vector search (for :func:`classify_miss`).

    >>> from types import SimpleNamespace
    >>> tree = {"and": [{"leaf": "text", "field": "review", "op": "IN", "values": ["quiet"]},
    ...                 {"leaf": "structured", "field": "price", "op": "<", "values": [50]}]}
    >>> inst = SimpleNamespace(level="L2", modalities=("structured", "text"), tree=json.dumps(tree),
    ...     program=json.dumps({"sql": "", "retrieval_list": [{"field": "review", "query": "quiet"}]}),
    ...     relevant_n=3, gold_id="p1")
    >>> t = traits(inst)
    >>> (t["kind"], t["searches"], t["relevant"], t["modality"])
    ('mixed', '1', '2-5', 'structured+text')
    """
    leaves = _leaves(json.loads(instance.tree))
    entries = json.loads(instance.program).get("retrieval_list", [])
    pure = bool(leaves) and all(leaf["leaf"] != "structured" for leaf in leaves)
    return {
        "level": instance.level,
        "modality": "+".join(instance.modalities),
        "kind": "pure-vector" if pure else "mixed",
        "searches": str(len(entries)) if len(entries) < 3 else "3+",
        "relevant": relevant_bucket(instance.relevant_n),
        "gold": instance.gold_id,
        "field": entries[0].get("field") if entries else None,
        "query": entries[0].get("query") if entries else None,
        "mode": entries[0].get("mode", "dense") if entries else None,
    }


def align(doc: str, like: str | None) -> str:
    """``doc``'s id written as this corpus writes ids: a generated corpus pads the number to its size, so
    product 4,090 is ``P04090`` in 5k products and ``P004090`` in 200k.

    >>> align("P04090", "P110554"), align("P04090", None), align("x1", "P000002")
    ('P004090', 'P04090', 'x1')
    """
    a, b = re.fullmatch(r"([A-Za-z]*)(\d+)", doc), re.fullmatch(r"([A-Za-z]*)(\d+)", like or "")
    if a is None or b is None or a.group(1) != b.group(1):
        return doc
    return a.group(1) + a.group(2).lstrip("0").rjust(len(b.group(2)), "0")


def record(outcome: Any, hit: bool, gold: str) -> dict[str, Any]:
    """One program's outcome under one engine, compactly: empty, hit, gold's rank (None outside the
    results) and the first and gold scores."""
    ids = list(getattr(outcome, "ids", ()) or ())
    scores = list(getattr(outcome, "scores", ()) or ())
    gold = align(gold, ids[0] if ids else None)
    rank = ids.index(gold) if gold in ids else None
    lists = list((getattr(outcome, "candidates", None) or {}).values())
    return {
        "gold": gold,
        "last_candidate": lists[0][-1] if len(lists) == 1 and lists[0] else None,
        "empty": not ids,
        "hit": bool(hit),
        "gold_rank": rank,
        "first": ids[0] if ids else None,
        "first_score": scores[0] if scores else None,
        "gold_score": scores[rank] if rank is not None and rank < len(scores) else None,
    }


def _tokens(text: Any) -> set[str]:
    return set(re.findall(r"\w+", str(text or "").lower()))


def classify_miss(rec: Mapping[str, Any], first_text: Any, gold_text: Any, beyond: bool | None = None) -> str:
    """Why a pure-vector request's non-empty first result is not relevant (module docstring). ``beyond``:
    for a gold document outside the results, whether its similarity reaches the K-th candidate's (None:
    not scored).

    >>> classify_miss({"gold_rank": 3, "first_score": 0.5, "gold_score": 0.5}, "a b", "c d")
    'tie'
    >>> classify_miss({"gold_rank": None, "first_score": 0.5, "gold_score": None}, "a b", "c d")
    'gold outside K'
    >>> classify_miss({"gold_rank": None}, "a b", "c d", beyond=True)
    'tie beyond K'
    >>> classify_miss({"gold_rank": 2, "first_score": 0.9, "gold_score": 0.5}, "red desk lamp", "red desk lamp")
    'near-duplicate'
    >>> classify_miss({"gold_rank": 2, "first_score": 0.9, "gold_score": 0.5}, "red lamp", "blue desk")
    'lexical neighbour'
    """
    if rec.get("gold_rank") is None:
        return {True: "tie beyond K", False: "ranked below K"}.get(beyond, "gold outside K")  # type: ignore[arg-type]
    first, gold = rec.get("first_score"), rec.get("gold_score")
    if first is not None and gold is not None and abs(float(first) - float(gold)) <= 1e-9:
        return "tie"
    a, b = _tokens(first_text), _tokens(gold_text)
    if a and b and len(a & b) / len(a | b) >= NEAR_DUPLICATE:
        return "near-duplicate"
    return "lexical neighbour"


def _reaches_k(handle: Any, t: Mapping[str, Any], rec: Mapping[str, Any]) -> bool | None:
    """Whether the gold document's similarity to the phrase reaches the K-th candidate's (dense searches)."""
    import numpy as np

    from indexing.stores.base import similarity

    if t["mode"] != "dense" or not t["query"] or rec.get("last_candidate") is None:
        return None
    query = handle.embedder(t["field"]).embed([t["query"]])
    doc = rec.get("gold") or t["gold"]
    vectors = handle.vectors.fetch_vectors(handle.collection, t["field"], [doc, rec["last_candidate"]])
    if doc not in vectors or rec["last_candidate"] not in vectors:
        return None
    # scored as the store scores the field's searches, under its metric
    docs = np.stack([np.asarray(vectors[d], dtype=np.float32) for d in (doc, rec["last_candidate"])])
    gold, last = (float(v) for v in similarity(handle.vectors.metric, query, docs)[0])
    return gold >= last - 1e-6


def miss_texts(
    handle: Any, program_traits: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> list[str | None]:
    """The :func:`classify_miss` class of every pure-vector L1 program whose first result missed (None for
    the others), the searched field of the first result and of the gold document read from the index."""
    todo = [
        i
        for i, (t, r) in enumerate(zip(program_traits, records, strict=True))
        if t["kind"] == "pure-vector"
        and t["level"] == "L1"
        and not r["empty"]
        and not r["hit"]
        and t["field"]
    ]
    out: list[str | None] = [None] * len(records)
    for field in sorted({program_traits[i]["field"] for i in todo}):
        mine = [i for i in todo if program_traits[i]["field"] == field]
        ids = sorted({records[i]["first"] for i in mine} | {records[i]["gold"] for i in mine})
        text = {d["id"]: d.get(field) for d in handle.fetch_docs(ids, [field])}
        for i in mine:
            rec, t = records[i], program_traits[i]
            beyond = _reaches_k(handle, t, rec) if rec["gold_rank"] is None else None
            out[i] = classify_miss(rec, text.get(rec["first"]), text.get(rec["gold"]), beyond)
    return out


def breakdown(
    program_traits: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """P@1 and empty share of ``records`` grouped along each of :data:`DIMENSIONS`: ``{dimension: {group:
    {"n", "p_at_1", "empty"}}}``.

    >>> t = [{"level": "L1", "modality": "text", "kind": "pure-vector", "searches": "1", "relevant": "1"}] * 2
    >>> r = [{"empty": False, "hit": True}, {"empty": True, "hit": False}]
    >>> breakdown(t, r)["outcome"]
    {'answered': {'n': 1, 'p_at_1': 1.0, 'empty': 0.0}, 'empty': {'n': 1, 'p_at_1': 0.0, 'empty': 1.0}}
    """
    out: dict[str, Any] = {}
    for dim in DIMENSIONS:
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for t, r in zip(program_traits, records, strict=True):
            key = ("empty" if r["empty"] else "answered") if dim == "outcome" else str(t[dim])
            groups.setdefault(key, []).append(r)
        out[dim] = {
            key: {
                "n": len(rs),
                "p_at_1": round(sum(r["hit"] for r in rs) / len(rs), 4),
                "empty": round(sum(r["empty"] for r in rs) / len(rs), 4),
            }
            for key, rs in sorted(groups.items())
        }
    return out


def misses(classes: Sequence[str | None]) -> dict[str, int]:
    """How many pure-vector L1 misses fall in each class of :func:`classify_miss`."""
    return dict(Counter(c for c in classes if c is not None).most_common())


def table(runs: Sequence[Mapping[str, Any]], candidate: str) -> list[str]:
    """The break-down of one candidate engine at every size, as text lines: one row per group, one
    ``P@1 / empty`` column per run; then the pure-vector L1 misses by class."""
    runs = [
        r for r in runs if candidate in r.get("candidates", {}) and "breakdown" in r["candidates"][candidate]
    ]
    if not runs:
        return []
    label = runs[0]["candidates"][candidate]["label"]
    lines = ["", f"break-down of {label}: P@1 / share returning nothing (n at the smallest size)"]
    lines.append(f"{'dimension':<10} {'group':<20} {'n':>4} " + " ".join(f"{r['label']:>18}" for r in runs))
    first = runs[0]["candidates"][candidate]["breakdown"]
    for dim in DIMENSIONS:
        if dim == "outcome":
            continue  # its groups change with the size: read the empty column instead
        for group, cell in first.get(dim, {}).items():
            cells = []
            for r in runs:
                x = r["candidates"][candidate]["breakdown"].get(dim, {}).get(group)
                cells.append("-" if x is None else f"{x['p_at_1']:.2f} / {x['empty']:.0%}")
            lines.append(f"{dim:<10} {group:<20} {cell['n']:>4} " + " ".join(f"{c:>18}" for c in cells))
    for r in runs:
        got = r["candidates"][candidate].get("misses", {})
        lines.append(f"  {r['label']}: pure-vector L1 first results that miss: "
                     + (", ".join(f"{k} {v}" for k, v in got.items()) or "none"))  # fmt: skip
    return lines
