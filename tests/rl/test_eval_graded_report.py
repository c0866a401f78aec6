"""Graded metrics through the harness: relevant sets in, P@1 and friends in every report; none in, "n/a"."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from rl.eval.compare import FIGURE_P1, compare
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome
from rl.eval.metrics import FOUND_VS_SATISFIED, GRADED, GRADED_NA
from rl.eval.report import LEVEL_PNG, SUMMARY, TABLE, headline, load_summary, write_run
from rl.eval.runner import evaluate
from tests.rl.eval_support import Inst


def _instances(n: int, *, labeled: bool) -> list[Inst]:
    out = []
    for i in range(n):
        rel = (f"P{i:05d}", f"R{i:05d}", f"S{i:05d}")  # the gold and two other right answers
        out.append(
            Inst(f"q{i:03d}", f"request {i}", "{}", f"P{i:05d}", ("L1", "L2", "L3")[i % 3], ("text",),
                 3 if labeled else None, rel if labeled else ())
        )  # fmt: skip
    return out


def _another_right_answer(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
    """Returns a relevant document that is not the gold first, then the gold."""
    return [Outcome.ranked([f"R{inst.gold_id[1:]}", "X1", inst.gold_id]) for inst in batch]


def _gold_first(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
    return [Outcome.ranked([inst.gold_id, "X1"]) for inst in batch]


@pytest.fixture()
def cfg(tmp_path: Path) -> Config:
    return Config(workspace=tmp_path / "ws")


def test_a_right_answer_that_is_not_the_gold_satisfies_the_request(cfg: Config) -> None:
    spec = MethodSpec("other-right", _another_right_answer, "a relevant non-gold document first")
    run = evaluate(cfg, "ecommerce", spec, _instances(12, labeled=True), progress=False)
    scores = run.results[0].scores
    assert scores["hit@1"] == 0.0 and scores["p@1"] == 1.0
    assert scores["p@5"] == pytest.approx(2 / 5) and scores["recall@10"] == pytest.approx(2 / 3)
    run_dir = write_run(Workspace(cfg.workspace), run, resamples=50)
    summary = load_summary(run_dir)
    assert summary["graded"] == {"available": True, "reason": None}
    assert summary["overall"]["metrics"]["p@1"]["mean"] == 1.0
    assert set(GRADED) <= set(summary["by_level"]["L2"]["metrics"])
    md = (run_dir / TABLE).read_text()
    assert "P@1" in md and "nDCG@10" in md and FOUND_VS_SATISFIED in md
    assert (run_dir / LEVEL_PNG).stat().st_size > 0


def test_without_relevant_sets_the_graded_metrics_are_na_with_the_reason_never_zero(cfg: Config) -> None:
    spec = MethodSpec("gold-first", _gold_first, "gold first")
    run = evaluate(cfg, "email", spec, _instances(9, labeled=False), progress=False)
    assert all(not set(GRADED) & set(r.scores) for r in run.results)
    run_dir = write_run(Workspace(cfg.workspace), run, resamples=50)
    summary = json.loads((run_dir / SUMMARY).read_text())
    assert summary["graded"] == {"available": False, "reason": GRADED_NA}
    assert "p@1" not in summary["overall"]["metrics"]
    table = headline(summary)
    assert "n/a" in table
    assert GRADED_NA in (run_dir / TABLE).read_text()


def test_compare_shows_graded_columns_and_a_p1_chart(cfg: Config) -> None:
    ws = Workspace(cfg.workspace)
    instances = _instances(12, labeled=True)
    for name, fn in (("gold-first", _gold_first), ("other-right", _another_right_answer)):
        write_run(
            ws,
            evaluate(cfg, "ecommerce", MethodSpec(name, fn, name), instances, progress=False),
            resamples=50,
        )
    result = compare(ws, domain="ecommerce", split="test")
    assert "P@1 [95% CI]" in result.table and "P@1 L1" in result.table
    row = next(line for line in result.table.splitlines() if line.startswith("| other-right |"))
    assert "1.000 [1.000, 1.000]" in row  # P@1: a right answer, though not the gold
    assert (result.path / FIGURE_P1).is_file()
