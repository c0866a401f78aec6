"""A trained planner's familiarity gate (:mod:`serving.familiarity`), built from the benchmark it trained on.

``prore train familiarity RUN/final`` reads the train split's requests of the planner's corpora, calibrates the
thresholds on them alone, writes them into the model directory and names them on its card. RL runs started
from a planner with a gate carry it to their own checkpoint (:func:`carry_familiarity`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from indexing.workspace import Workspace, atomic_write_json
from rl.datasets.store import load_split
from rl.errors import TrainError
from serving.familiarity import DEFAULT_QUANTILE, FAMILIARITY_DIR, Familiarity, card_familiarity
from serving.prompt import CARD, read_card


def add_familiarity(model_dir: Path, bench: Workspace, *, domains: Sequence[str] | None = None,
                    quantile: float = DEFAULT_QUANTILE) -> dict[str, Any]:  # fmt: skip
    """Build and save ``model_dir``'s gate over ``bench``'s train split of ``domains`` (default: the card's) and
    record it on the card; returns the card's new ``familiarity`` section."""
    if not (model_dir / CARD).is_file():
        raise TrainError(f"{model_dir}: no planner card ({CARD}); give the gate to a trained planner's final/",
                         code="planner_path")  # fmt: skip
    card = read_card(model_dir)
    chosen = list(dict.fromkeys(domains or card.get("domains") or ()))
    if not chosen:
        raise TrainError(f"{model_dir}: the card names no corpus; pass --domain", code="planner_path")
    requests = {d: [i.nl for i in load_split(bench, d, "train")] for d in chosen}
    section = Familiarity.calibrate(requests, quantile).save(model_dir)
    atomic_write_json(model_dir / CARD, {**card, "familiarity": section})
    return section


def carry_familiarity(init: Path | None, final: Path) -> dict[str, Any]:
    """The card entry of ``init``'s gate, its files copied into ``final`` (nothing when it has none)."""
    if init is None:
        return {}
    section = card_familiarity(read_card(init))
    if section is None:
        return {}
    gate = init / section.get("index", FAMILIARITY_DIR)
    if not gate.is_dir():
        raise TrainError(f"{init}: its card names a familiarity gate at {gate.name}/, which is not there; "
                         f"run prore train familiarity {init} again", code="planner_path")  # fmt: skip
    shutil.copytree(gate, final / FAMILIARITY_DIR, dirs_exist_ok=True)
    return {"familiarity": {**section, "index": FAMILIARITY_DIR}}
