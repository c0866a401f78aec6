"""The planner's familiarity gate (:mod:`serving.familiarity`), built by ``prore train familiarity`` from the
benchmark's train split, carried by RL runs, and read back from the card."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets.store import load_split
from rl.train.familiarity import add_familiarity, carry_familiarity
from serving.familiarity import (
    FamiliarityError,
    card_familiarity,
    mask_numbers,
    nearest_other,
    open_familiarity,
)
from serving.prompt import CARD, read_card

UNLIKE = "zebra striped garden hose reel for a sailboat"
"""A request worded like no training request of either corpus."""


def planner_dir(
    tmp_path: Path, name: str = "final", domains: tuple[str, ...] = ("ecommerce", "email")
) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / CARD).write_text(json.dumps({"profile": "request", "domains": list(domains), "algorithm": "sft"}))
    return out


def test_the_gate_is_calibrated_on_the_train_split_and_named_by_the_card(
    train_bench: Workspace, tmp_path: Path
) -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    model = planner_dir(tmp_path)
    rc = main(["--workspace", str(train_bench.root), "train", "familiarity", str(model), "--quantile", "0.1"])
    assert rc == 0
    card = read_card(model)
    section = card_familiarity(card)
    assert section is not None and card["algorithm"] == "sft", "the rest of the card is kept"
    assert set(section["threshold"]) == {"ecommerce", "email"} and section["quantile"] == 0.1
    gate = open_familiarity(model)
    for domain in ("ecommerce", "email"):
        train = [i.nl for i in load_split(train_bench, domain, "train")]
        assert section["requests"][domain] == len(train)
        # The threshold is the quantile of the training requests' own leave-one-out nearest similarity,
        # recomputed here with scikit-learn directly.
        matrix = TfidfVectorizer(
            preprocessor=mask_numbers, analyzer="char_wb", ngram_range=(3, 5)
        ).fit_transform(train)
        own = nearest_other(matrix, train)
        assert section["threshold"][domain] == pytest.approx(float(np.quantile(own, 0.1)), abs=1e-5)
        assert float(np.mean(own >= section["threshold"][domain])) >= 0.9 - 0.02
        sims = gate.similarity(domain, [train[0], UNLIKE])
        assert sims[0] == pytest.approx(1.0, abs=1e-4), "a training request is its own nearest"
        assert gate.familiar(domain, [train[0], UNLIKE]) == [True, False], sims
    test = [i.nl for i in load_split(train_bench, "ecommerce", "test")]
    assert np.mean(gate.familiar("ecommerce", test)) >= 0.5, "test requests share the training templates"


def test_an_rl_run_carries_its_init_planners_gate(train_bench: Workspace, tmp_path: Path) -> None:
    init = planner_dir(tmp_path, "sft")
    section = add_familiarity(init, train_bench, domains=["email"])
    final = tmp_path / "rl"
    final.mkdir()
    entry = carry_familiarity(init, final)
    assert entry == {"familiarity": section}
    (final / CARD).write_text(
        json.dumps({"profile": "request", "domains": ["email"], "algorithm": "dapo", **entry})
    )
    gate = open_familiarity(final)
    assert set(gate.threshold) == {"email"} and gate.threshold["email"] == section["threshold"]["email"]
    assert carry_familiarity(planner_dir(tmp_path, "plain"), final) == {}, "nothing to carry"
    with pytest.raises(FamiliarityError, match="knows no 'ecommerce' training requests"):
        gate.similarity("ecommerce", ["anything"])


def test_a_planner_without_a_gate_or_with_another_version_is_refused_in_one_line(
    train_bench: Workspace, tmp_path: Path
) -> None:
    model = planner_dir(tmp_path)
    with pytest.raises(FamiliarityError) as info:
        open_familiarity(model)
    assert info.value.code == "familiarity_missing" and "prore train familiarity" in str(info.value)
    assert "\n" not in str(info.value)
    add_familiarity(model, train_bench, domains=["email"])
    card = read_card(model)
    card["familiarity"]["version"] = "0" * 16
    (model / CARD).write_text(json.dumps(card))
    with pytest.raises(FamiliarityError) as info:
        open_familiarity(model)
    assert info.value.code == "familiarity_version"
    card["familiarity"]["threshold"] = "high"
    (model / CARD).write_text(json.dumps(card))
    with pytest.raises(FamiliarityError, match="malformed"):
        open_familiarity(model)
    with pytest.raises(FamiliarityError, match="quantile must be in"):
        add_familiarity(model, train_bench, quantile=1.5)
