"""Benchmark files: one parquet file per split plus ``manifest.json``, written last, under
``Workspace.bench_dir(domain)``. A benchmark is complete exactly when its manifest exists.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.schema import schema_for
from indexing.workspace import Workspace, atomic_write_json, staged_dir
from rl.datasets.errors import BenchError

MANIFEST = "manifest.json"
SPLITS = ("train", "test", "ood")
DEFAULT_SIZES: dict[str, int] = {"train": 20_000, "test": 3_000, "ood": 1_000}
"""Instances per split and domain (the paper's 20k train / 3k test, plus a 1k OOD split)."""
RELEVANT_CAP = 1_000
"""Most relevant ids stored with an instance (the gold always among them); ``relevant_n`` is the full
size and ``relevant_capped`` says the cap cut the stored ids."""


def check_sizes(sizes: Mapping[str, int]) -> None:
    """Every split size must be a positive integer."""
    for split in SPLITS:
        n = sizes.get(split)
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise BenchError(f"--{split} must be a positive number of instances, got {n}", code="bench_size")


@dataclass(frozen=True)
class Instance:
    """One benchmark query: the request, its gold program and the document it must find first."""

    qid: str
    split: str
    domain: str
    nl: str
    """The natural-language request."""
    program: str
    """The gold DSL program as JSON text (``sql`` and ``retrieval_list``)."""
    gold_id: str
    level: str
    """``L1``, ``L2`` or ``L3`` (number and nesting of conditions)."""
    modalities: tuple[str, ...]
    """Sorted subset of structured / text / image."""
    family: str
    """Template family the request was verbalized with."""
    operators: tuple[str, ...]
    """Sorted operators of the program, e.g. ``<``, ``IN``, ``NOT``, ``id IN <text>``."""
    tree: str
    """The condition tree as JSON (see :func:`rl.datasets.tree.to_json`)."""
    rewritten: bool = False
    """Whether an LLM endpoint rewrote the templated request."""
    noisy: bool = False
    """Whether the request went through the noisy wording family (typos, abbreviations, ...)."""
    relevant_n: int | None = None
    """How many documents satisfy the whole condition tree (see :mod:`rl.datasets.relevance`); ``None``
    when the corpus has no label table (real data), so the instance has no relevant set."""
    relevant_ids: tuple[str, ...] = ()
    """The relevant documents' ids, sorted, at most :data:`RELEVANT_CAP` of them (the gold among them)."""
    relevant_capped: bool = False
    """Whether ``relevant_ids`` holds fewer ids than ``relevant_n`` because of the cap."""

    @property
    def program_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.program)
        return data


ARROW_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("split", pa.string()),
        ("domain", pa.string()),
        ("nl", pa.string()),
        ("program", pa.string()),
        ("gold_id", pa.string()),
        ("level", pa.string()),
        ("modalities", pa.list_(pa.string())),
        ("family", pa.string()),
        ("operators", pa.list_(pa.string())),
        ("tree", pa.string()),
        ("rewritten", pa.bool_()),
        ("noisy", pa.bool_()),
        ("relevant_n", pa.int64()),
        ("relevant_ids", pa.list_(pa.string())),
        ("relevant_capped", pa.bool_()),
    ]
)
_TUPLES = ("modalities", "operators", "relevant_ids")


def _table(instances: Sequence[Instance]) -> pa.Table:
    rows = [asdict(i) for i in instances]
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def bench_fingerprint(splits: Mapping[str, Sequence[Instance]]) -> str:
    """A hash of every instance of every split (16 hex digits): equal exactly when the benchmarks are."""
    digest = hashlib.sha256()
    for split in sorted(splits):
        for inst in splits[split]:
            digest.update(
                json.dumps([split, asdict(inst)], sort_keys=True, ensure_ascii=False, default=str).encode()
            )
    return digest.hexdigest()[:16]


def write_bench(
    ws: Workspace, domain: str, splits: Mapping[str, Sequence[Instance]], manifest: Mapping[str, Any]
) -> dict[str, Any]:
    """Write every split and then the manifest, replacing any previous benchmark of ``domain``.

    Nothing is visible until all files are written; a failure leaves the previous benchmark as it was.
    """
    with staged_dir(ws.bench_dir(domain)) as tmp:
        for split, instances in splits.items():
            pq.write_table(_table(instances), tmp / f"{split}.parquet", compression="zstd")
        out = {
            **manifest,
            "domain": domain,
            "splits": {s: len(v) for s, v in splits.items()},
            "fingerprint": bench_fingerprint(splits),
        }
        atomic_write_json(tmp / MANIFEST, out)
    return out


def load_manifest(ws: Workspace, domain: str) -> dict[str, Any]:
    """The manifest of the workspace benchmark of ``domain``, or a :class:`BenchError` saying how to
    build one."""
    schema_for(domain)
    path = ws.bench_dir(domain) / MANIFEST
    if not path.is_file():
        raise BenchError(
            f"no {domain} benchmark in {ws.root}; run: prore bench synth {domain}", code="no_bench"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


PLANNING_SWITCHES = ("pushdown", "adaptive_k", "conditional")
"""The planning passes that change a placeholder's meaning, compared between a benchmark and an engine."""
PLANNING_WIDTHS = ("chain_head_docs", "chain_head_max")
"""The planning widths that change a placeholder's meaning (0, or absent from an older manifest: off)."""


def kept_under(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The engine planning a benchmark was synthesized under, as its manifest records it (``serving.planning``'s
    fields); a manifest written before it was recorded was kept under fixed K, every pass off, then the only
    default."""
    recorded = manifest.get("planning")
    return (
        dict(recorded)
        if isinstance(recorded, Mapping)
        else {"mode": "fixed-k", **dict.fromkeys(PLANNING_SWITCHES, False)}
    )


def planning_mismatch(manifest: Mapping[str, Any], planning: Mapping[str, Any]) -> str | None:
    """One line saying that an engine of ``planning`` is not the one the benchmark was kept under (its gold
    programs may then rank another document first, so the oracle falls below 1.0), or ``None``.

    Compared as they act on the benchmark's corpus (``corpus_rows``): a ``chain_head_docs`` of that size or
    more (or 0, or a ``chain_head_max`` of 0) widens no head there, so both count as off.
    """
    from serving.settings import head_widens

    rows = int(manifest.get("corpus_rows") or 0) or sys.maxsize  # unrecorded: any widening counts

    def effective(p: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: bool(p.get(k)) for k in PLANNING_SWITCHES}
        out.update({k: int(p.get(k) or 0) for k in PLANNING_WIDTHS})
        if not head_widens(out["chain_head_docs"], out["chain_head_max"], rows):
            out.update(dict.fromkeys(PLANNING_WIDTHS, 0))
        return out

    was, now = effective(kept_under(manifest)), effective(planning)
    differ = [k for k in was if was[k] != now[k]]
    if not differ:
        return None
    said = ", ".join(f"{k} {was[k]} -> {now[k]}" for k in differ)
    return (
        f"the benchmark was synthesized under another engine than this run's ({said}; serving.planning), so "
        "its gold programs may rank another document first; synthesize it again, or run under its planning"
    )


def load_split(ws: Workspace, domain: str, split: str) -> list[Instance]:
    """The instances of one split (``train``, ``test`` or ``ood``), in stored order."""
    if split not in SPLITS:
        raise BenchError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}", code="bench_split")
    load_manifest(ws, domain)
    path = ws.bench_dir(domain) / f"{split}.parquet"
    if not path.is_file():
        raise BenchError(f"the {domain} benchmark has no {split} split", code="bench_split")
    rows = pq.read_table(path).to_pylist()
    return [Instance(**{**r, **{k: tuple(r[k]) for k in _TUPLES if k in r}}) for r in rows]
