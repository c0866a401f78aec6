"""Benchmark files: one parquet file per split plus ``manifest.json``, written last, under
``Workspace.bench_dir(domain)``. A benchmark is complete exactly when its manifest exists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.schema import schema_for
from indexing.workspace import Workspace, atomic_write_json, staged_dir
from rl.bench.errors import BenchError

MANIFEST = "manifest.json"
SPLITS = ("train", "test", "ood")
DEFAULT_SIZES: dict[str, int] = {"train": 20_000, "test": 3_000, "ood": 1_000}
"""Instances per split and domain (the paper's 20k train / 3k test, plus a 1k OOD split)."""


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
    """The condition tree as JSON (see :func:`rl.bench.tree.to_json`)."""
    rewritten: bool = False
    """Whether an LLM endpoint rewrote the templated request."""

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
    ]
)


def _table(instances: Sequence[Instance]) -> pa.Table:
    rows = [asdict(i) for i in instances]
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def write_bench(
    ws: Workspace, domain: str, splits: Mapping[str, Sequence[Instance]], manifest: Mapping[str, Any]
) -> dict[str, Any]:
    """Write every split and then the manifest, replacing any previous benchmark of ``domain``.

    Nothing is visible until all files are written; a failure leaves the previous benchmark as it was.
    """
    with staged_dir(ws.bench_dir(domain)) as tmp:
        for split, instances in splits.items():
            pq.write_table(_table(instances), tmp / f"{split}.parquet", compression="zstd")
        out = {**manifest, "domain": domain, "splits": {s: len(v) for s, v in splits.items()}}
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


def load_split(ws: Workspace, domain: str, split: str) -> list[Instance]:
    """The instances of one split (``train``, ``test`` or ``ood``), in stored order."""
    if split not in SPLITS:
        raise BenchError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}", code="bench_split")
    load_manifest(ws, domain)
    path = ws.bench_dir(domain) / f"{split}.parquet"
    if not path.is_file():
        raise BenchError(f"the {domain} benchmark has no {split} split", code="bench_split")
    rows = pq.read_table(path).to_pylist()
    return [
        Instance(**{**r, "modalities": tuple(r["modalities"]), "operators": tuple(r["operators"])})
        for r in rows
    ]
