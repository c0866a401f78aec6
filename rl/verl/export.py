"""verl's datasets from a benchmark: the RL parquet (prompts and ground truth) and the SFT parquet (chats).

One directory per domain, published atomically under ``<workspace>/train/<domain>`` (numbered versions and a
``CURRENT`` pointer, like corpora and benchmarks)::

    rl/train.parquet  rl/val.parquet  rl/test.parquet  rl/ood.parquet
    sft/train.parquet sft/val.parquet
    manifest.json

The RL rows have the columns verl's ``RLHFDataset`` and its reward loop read (``data.prompt_key=prompt``,
``data.reward_fn_key=data_source``):

- ``data_source``: ``proretrieval/<domain>``; :func:`rl.verl.reward_fn.compute_score` reads the domain from it;
- ``prompt``: the chat messages of :func:`rl.prompt.messages` (system and user);
- ``ability``: ``retrieval``;
- ``reward_model``: ``{"style": "rule", "ground_truth": <gold id>}``;
- ``extra_info``: ``{"instance_id", "split", "index", "level", "domain"}``.

The SFT rows have one column, ``messages`` (verl's ``MultiTurnSFTDataset``, ``data.messages_key=messages``):
the same system and user messages plus the gold program as the assistant's answer.

The validation split is held out of the benchmark's train split (``val_fraction`` of it, chosen by a hash
of the instance id, so the choice does not depend on the order of the split); the test and OOD splits stay
for evaluation and are written as RL parquet only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.config import EmbedderConfig
from indexing.schema import schema_for
from indexing.workspace import Workspace, atomic_write_json, published_dir, staged_dir
from rl.datasets.store import SPLITS, Instance, load_manifest, load_split
from rl.errors import TrainError
from rl.prompt import PROFILES, Message, Profile, messages
from serving.exemplars import ExemplarIndex, Shot, open_for_planner

DATA_SOURCE_PREFIX = "proretrieval/"
ABILITY = "retrieval"
MANIFEST = "manifest.json"

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
RL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(_MESSAGE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("instance_id", pa.string()),
                    ("split", pa.string()),
                    ("index", pa.int64()),
                    ("level", pa.string()),
                    ("domain", pa.string()),
                ]
            ),
        ),
    ]
)
"""Columns of the RL parquet."""

SFT_SCHEMA = pa.schema([("messages", pa.list_(_MESSAGE))])
"""Columns of the SFT parquet."""


@dataclass(frozen=True)
class ExportConfig:
    """What an export writes."""

    profile: Profile = "full"
    """Prompt profile (:mod:`rl.prompt`): ``full`` (every rule, for Qwen3-4B/8B), ``short``, or ``compact`` (the
    local planners' default); it must be the one the trained model reads."""
    val_fraction: float = 0.05
    """Share of the benchmark's train split held out for validation (SFT checkpoint choice, RL validation)."""
    exemplars: int = 0
    """Exemplars per prompt (:mod:`serving.exemplars`), from an index of the export's train rows written
    beside the parquet (``exemplars/``, named in the manifest); 0: none. The SFT model trained on this export
    must ship that folder in its model directory, with the manifest's ``exemplars`` as its card's section."""
    exemplars_from: Path | None = None
    """A planner model directory whose card names an exemplar index: its index and ``k`` build every prompt
    (RL after an SFT run, so the cluster's prompts are the ones the planner was trained on)."""
    embedder: EmbedderConfig | None = None
    """How exemplar requests are embedded (the index records the vector space)."""

    def __post_init__(self) -> None:
        if self.exemplars < 0 or (self.exemplars and self.exemplars_from is not None):
            raise TrainError("give --exemplars K (a new index) or --exemplars-from PLANNER, not both; K >= 0",
                             code="train_exemplars")  # fmt: skip
        if self.profile not in PROFILES:
            raise TrainError(
                f"unknown prompt profile {self.profile!r}; choose one of {', '.join(PROFILES)}",
                code="train_profile",
            )
        if not 0.0 < self.val_fraction < 1.0:
            raise TrainError(
                f"val_fraction must be between 0 and 1, got {self.val_fraction}", code="train_val"
            )


def data_source(domain: str) -> str:
    """The ``data_source`` of a domain's rows: ``proretrieval/ecommerce`` or ``proretrieval/email``."""
    return DATA_SOURCE_PREFIX + schema_for(domain).domain


def domain_of(source: str) -> str:
    """The domain a ``data_source`` names; a :class:`TrainError` for any other source.

    >>> domain_of("proretrieval/email")
    'email'
    """
    if not source.startswith(DATA_SOURCE_PREFIX):
        raise TrainError(f"data_source {source!r} is not one of this project's ({DATA_SOURCE_PREFIX}<domain>)",
                         code="data_source")  # fmt: skip
    domain = source[len(DATA_SOURCE_PREFIX) :]
    return schema_for(domain).domain


def train_root(ws: Workspace, domain: str) -> Path:
    """Publish root of the exported datasets of ``domain``."""
    return ws.root / "train" / domain


def train_dir(ws: Workspace, domain: str) -> Path:
    """The published export of ``domain`` (resolved through ``CURRENT``)."""
    return published_dir(train_root(ws, domain))


def is_val(qid: str, fraction: float) -> bool:
    """Whether the train instance ``qid`` is held out for validation: a stable hash below ``fraction``."""
    h = int.from_bytes(hashlib.blake2b(qid.encode(), digest_size=8).digest(), "big")
    return h / 2**64 < fraction


def rl_row(
    inst: Instance, split: str, index: int, profile: Profile, shots: Sequence[Shot] = ()
) -> dict[str, Any]:
    """One RL row (see the module docstring); ``shots`` are the request's exemplars."""
    return {
        "data_source": data_source(inst.domain),
        "prompt": messages(inst.domain, inst.nl, profile=profile, shots=shots),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": inst.gold_id},
        "extra_info": {
            "instance_id": inst.qid,
            "split": split,
            "index": index,
            "level": inst.level,
            "domain": inst.domain,
        },
    }


def sft_row(inst: Instance, profile: Profile, shots: Sequence[Shot] = ()) -> dict[str, list[Message]]:
    """One SFT row: the prompt's messages and the gold program as the assistant's answer."""
    chat = messages(inst.domain, inst.nl, profile=profile, shots=shots)
    chat.append({"role": "assistant", "content": inst.program})
    return {"messages": chat}


def _write(path: Path, rows: Sequence[dict[str, Any]], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path, compression="zstd")


def export(ws: Workspace, domain: str, config: ExportConfig | None = None) -> dict[str, Any]:
    """Write the RL and SFT parquet of the workspace benchmark of ``domain``; returns the manifest."""
    cfg = config or ExportConfig()
    bench = load_manifest(ws, domain)
    split_items = {s: load_split(ws, domain, s) for s in SPLITS}
    train = [i for i in split_items["train"] if not is_val(i.qid, cfg.val_fraction)]
    val = [i for i in split_items["train"] if is_val(i.qid, cfg.val_fraction)]
    if not train or not val:
        raise TrainError(
            f"the {domain} train split ({len(split_items['train'])} instances) is too small to hold out "
            f"a validation share of {cfg.val_fraction}", code="train_val",
        )  # fmt: skip
    parts = {"train": train, "val": val, "test": split_items["test"], "ood": split_items["ood"]}
    index, k = _exemplar_index(cfg, train)
    try:
        shots = {name: _shots(index, k, domain, items) for name, items in parts.items()}
    finally:
        if index is not None:
            index.close()
    with staged_dir(train_root(ws, domain)) as tmp:
        for name, items in parts.items():
            _write(tmp / "rl" / f"{name}.parquet",
                   [rl_row(i, name, n, cfg.profile, s) for n, (i, s) in enumerate(zip(items, shots[name], strict=True))],
                   RL_SCHEMA)  # fmt: skip
        for name in ("train", "val"):
            _write(tmp / "sft" / f"{name}.parquet",
                   [sft_row(i, cfg.profile, s) for i, s in zip(parts[name], shots[name], strict=True)], SFT_SCHEMA)  # fmt: skip
        if index is not None:
            index.save(tmp)
        manifest = {
            "domain": domain,
            "data_source": data_source(domain),
            "profile": cfg.profile,
            "val_fraction": cfg.val_fraction,
            "exemplars": index.card(k) if index is not None else None,
            "rows": {name: len(items) for name, items in parts.items()},
            "bench": {k: bench.get(k) for k in ("seed", "corpus_fingerprint", "index_version", "splits")},
        }
        atomic_write_json(tmp / MANIFEST, manifest)
    return manifest


def _exemplar_index(cfg: ExportConfig, train: Sequence[Instance]) -> tuple[ExemplarIndex | None, int]:
    if cfg.exemplars_from is not None:
        opened = open_for_planner(cfg.exemplars_from, cfg.embedder)
        if opened is None:
            raise TrainError(
                f"{cfg.exemplars_from}: the planner's card names no exemplar index", code="train_exemplars"
            )
        return opened
    if cfg.exemplars > 0:
        return ExemplarIndex.build(
            ((i.domain, i.nl, i.program) for i in train), embedder=cfg.embedder
        ), cfg.exemplars
    return None, 0


def _shots(index: ExemplarIndex | None, k: int, domain: str, items: Sequence[Instance]) -> list[list[Shot]]:
    return index.select(domain, [i.nl for i in items], k=k) if index is not None else [[] for _ in items]
