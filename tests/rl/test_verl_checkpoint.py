"""``prore train from-verl``: a verl checkpoint's Hugging Face weights become a planner directory with the card of
the model the run started from, its familiarity gate included, as a local RL run carries it. The checkpoint is
laid out as verl's trainer writes it (``global_step_N/actor/huggingface`` and the latest-step file) around the
session's real Qwen3 checkpoint; verl itself runs in ``make test-verl`` (tests/rl/test_verl_cpu.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from indexing.workspace import atomic_write_json
from prore.cli import main
from rl.errors import TrainError
from rl.verl.checkpoint import HF_SUBDIR, LATEST, checkpoint_steps, import_planner
from serving.familiarity import Familiarity, card_familiarity, load_familiarity
from serving.prompt import CARD, read_card
from tests.serving.planner_support import FAMILIAR_REQUEST, GATE_TRAINING


@pytest.fixture
def run(planner_checkpoint: Path, tmp_path: Path) -> tuple[Path, Path]:
    """``(checkpoint dir, init)``: steps 2 and 3 of a verl run, and the gated SFT planner it started from."""
    init = tmp_path / "sft-final"
    shutil.copytree(planner_checkpoint, init)
    gate = Familiarity.calibrate({"ecommerce": list(GATE_TRAINING)}).save(init)
    atomic_write_json(init / CARD, {"profile": "short", "domains": ["ecommerce"], "algorithm": "sft",
                                    "familiarity": gate})  # fmt: skip
    ckpt = tmp_path / "ckpt" / "dapo"
    for step in (2, 3):
        shutil.copytree(planner_checkpoint, ckpt / f"global_step_{step}" / HF_SUBDIR)
    (ckpt / LATEST).write_text("3\n")
    return ckpt, init


def test_the_imported_planner_carries_the_gate_of_the_model_it_started_from(
    run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, init = run
    assert checkpoint_steps(ckpt) == [2, 3]
    out = tmp_path / "dapo-planner"
    assert (
        main(["train", "from-verl", str(ckpt), "--init", str(init), "--out", str(out), "--algorithm", "dapo"])
        == 0
    )
    card = read_card(out)
    assert (card["profile"], card["algorithm"], card["verl_step"]) == ("short", "dapo", 3)
    section = card_familiarity(card)
    assert section is not None
    gate = load_familiarity(out, section)  # read from the planner's own directory, not the init's
    shutil.rmtree(init)
    assert gate.version == section["version"]
    assert gate.familiar("ecommerce", [FAMILIAR_REQUEST]) == [True]
    assert gate.familiar("ecommerce", ["an unread email from the landlord about the lease"]) == [False]


def test_an_init_whose_card_names_a_missing_gate_leaves_no_planner(
    run: tuple[Path, Path], tmp_path: Path
) -> None:
    ckpt, init = run
    shutil.rmtree(init / str(card_familiarity(read_card(init))["index"]))  # type: ignore[index]
    out = tmp_path / "dapo-planner"
    with pytest.raises(
        TrainError, match=r"names a familiarity gate at familiarity/, which is not there"
    ) as err:
        import_planner(ckpt, init, out, step=2, algorithm="dapo")
    assert err.value.code == "planner_path" and "\n" not in str(err.value)
    assert not out.exists() and not list(tmp_path.glob(".dapo-planner.*"))
