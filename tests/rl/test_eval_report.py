"""The harness around methods: registry, scoring of outcomes, stored reports, plots and comparisons.

These tests run fixed rankings through the harness (no store is involved, so none is faked); the
baselines are tested against the real engines in ``test_baselines_*``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from rl.eval.compare import compare, comparison_table, resolve_run
from rl.eval.errors import DuplicateMethod, EvalError, UnknownMethod
from rl.eval.methods import EvalInstance, MethodContext, MethodRegistry, MethodSpec, Outcome
from rl.eval.report import (
    LEVEL_PNG,
    MODALITY_PNG,
    QUERIES,
    SUMMARY,
    TABLE,
    latest_runs,
    load_summary,
    write_run,
)
from rl.eval.runner import evaluate, modality_group
from tests.rl.eval_support import instances


def _gold_at(position: int) -> MethodSpec:
    """A method that puts each gold id at ``position`` (1-based), and fails on every 7th query."""

    def run(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        out = []
        for inst in batch:
            if int(inst.qid[1:]) % 7 == 6:
                out.append(Outcome.failed("error exec_timeout:   too slow"))
                continue
            filler = [f"X{j}" for j in range(k)]
            filler.insert(position - 1, inst.gold_id)
            out.append(Outcome.ranked(filler))
        return out

    return MethodSpec(f"gold-at-{position}", run, "fixed rankings for the harness tests")


@pytest.fixture()
def cfg(tmp_path: Path) -> Config:
    return Config(workspace=tmp_path / "ws")


def test_registry_rejects_duplicates_and_lists_known_names() -> None:
    reg = MethodRegistry(providers=())
    spec = _gold_at(1)
    reg.register("a", description="first")(spec.run)
    with pytest.raises(DuplicateMethod):
        reg.register("a", description="again")(spec.run)
    reg.register("b", description="second", uses_gold=True)(spec.run)
    assert reg.names() == ("a", "b") and reg.get("b").uses_gold
    with pytest.raises(UnknownMethod) as err:
        reg.get("c")
    assert err.value.code == "unknown_method" and "a, b" in err.value.one_line()


PROVIDER_TARGET: MethodRegistry | None = None
"""The registry the provider module written by the next test registers into."""


def test_a_provider_that_fails_to_import_fails_every_lookup_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    module = tmp_path / "eval_provider_under_test.py"
    module.write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "eval_provider_under_test", raising=False)
    reg = MethodRegistry(providers=("eval_provider_under_test",))
    monkeypatch.setattr(sys.modules[__name__], "PROVIDER_TARGET", reg)
    for _ in range(2):  # a later lookup must not report an unknown method
        with pytest.raises(EvalError) as err:
            reg.get("planner")
        assert err.value.code == "method_provider"
        assert "a_dependency_that_is_not_installed" in err.value.one_line()
        assert "\n" not in err.value.one_line()
    # Once the provider imports, the next lookup finds what it registers.
    module.write_text(
        f"import {__name__} as t\n"
        "t.PROVIDER_TARGET.register('planner', description='from a provider')(t._gold_at(1).run)\n"
    )
    importlib.invalidate_caches()
    assert reg.get("planner").description == "from a provider"
    assert reg.names() == ("planner",)


def test_modality_groups() -> None:
    assert [modality_group(m) for m in [(), ("structured",), ("text",), ("image", "structured"), ("image", "text")]] == [
        "structured", "structured", "text", "image", "mixed",
    ]  # fmt: skip


def test_scores_match_positions_and_failures(cfg: Config) -> None:
    insts = instances(21)
    run = evaluate(cfg, "ecommerce", _gold_at(2), insts, k=20, batch_size=4, progress=False)
    failed = [r for r in run.results if r.error is not None]
    assert [r.qid for r in failed] == ["q006", "q013", "q020"]
    assert all(r.scores["exec"] == 0.0 and r.rank is None for r in failed)
    assert failed[0].error == "error exec_timeout: too slow"
    ok = [r for r in run.results if r.error is None]
    assert all(r.rank == 2 and r.scores["hit@1"] == 0.0 and r.scores["mrr"] == 0.5 for r in ok)
    assert all(len(r.ids) == 20 for r in ok)  # cut to k


def test_gold_below_cutoff_is_a_miss(cfg: Config) -> None:
    run = evaluate(cfg, "email", _gold_at(5), instances(3), k=4, progress=False)
    assert all(r.rank is None and r.scores["mrr"] == 0.0 for r in run.results)


def test_bad_arguments(cfg: Config) -> None:
    with pytest.raises(EvalError):
        evaluate(cfg, "ecommerce", _gold_at(1), instances(2), k=2, progress=False)
    with pytest.raises(EvalError):
        evaluate(cfg, "ecommerce", _gold_at(1), [], progress=False)

    def short(ctx: MethodContext, batch: Sequence[EvalInstance], k: int) -> list[Outcome]:
        return []

    with pytest.raises(EvalError, match="returned 0 outcomes"):
        evaluate(cfg, "ecommerce", MethodSpec("short", short, ""), instances(2), progress=False)


def _png_ok(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(str(path))
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def test_report_files_and_summary(cfg: Config) -> None:
    ws = Workspace(cfg.workspace)
    run = evaluate(cfg, "ecommerce", _gold_at(1), instances(40), split="test", progress=False)
    run_dir = write_run(ws, run, resamples=200)
    for name in (SUMMARY, TABLE, QUERIES, LEVEL_PNG, MODALITY_PNG):
        assert (run_dir / name).is_file(), name
    _png_ok(run_dir / LEVEL_PNG)
    _png_ok(run_dir / MODALITY_PNG)
    summary = load_summary(run_dir)
    overall = summary["overall"]
    assert overall["n"] == 40
    hit1 = overall["metrics"]["hit@1"]
    # 5 of 40 queries fail (q006, q013, ...), every other one has its gold at rank 1.
    assert hit1["mean"] == pytest.approx(35 / 40) and hit1["low"] <= hit1["mean"] <= hit1["high"]
    assert overall["metrics"]["exec"]["mean"] == pytest.approx(35 / 40)
    assert set(summary["by_level"]) == {"L1", "L2", "L3"}
    assert set(summary["by_modality"]) == {"structured", "text", "image", "mixed"}
    assert sum(g["n"] for g in summary["by_level"].values()) == 40
    lines = (run_dir / QUERIES).read_text().splitlines()
    assert len(lines) == 40 and json.loads(lines[0])["qid"] == "q000"
    table = (run_dir / TABLE).read_text()
    assert "| overall | 40 |" in table and "modality: mixed" in table
    # The five failures are execution failures; every query that ran found its gold; no relevant sets.
    assert summary["failures"] == {
        "format": 0,
        "validation": 0,
        "execution": 5,
        "miss": 0,
        "not-satisfied": 0,
    }
    assert "| 40 | 0 | 0 | 5 | 0 | n/a |" in table
    assert not list(run_dir.parent.glob(".*partial"))


def test_compare_latest_runs(cfg: Config) -> None:
    ws = Workspace(cfg.workspace)
    insts = instances(30)
    dirs = []
    for pos in (1, 2, 1):
        run = evaluate(cfg, "email", _gold_at(pos), insts, split="ood", progress=False)
        dirs.append(write_run(ws, run, resamples=100))
    latest = latest_runs(ws, "email", "ood")
    assert sorted(latest) == sorted([dirs[2], dirs[1]])  # the second gold-at-1 run replaced the first
    result = compare(ws, domain="email", split="ood")
    assert "gold-at-1" in result.table and "gold-at-2" in result.table
    assert (result.path / "compare.md").is_file()
    _png_ok(result.path / "compare.png")
    explicit = compare(ws, [str(dirs[0]), str(dirs[1].parent)])
    assert explicit.runs == (str(dirs[0]), str(dirs[1]))
    rows = [
        line
        for line in comparison_table([load_summary(d) for d in dirs]).splitlines()
        if line.startswith("| gold")
    ]
    assert len(rows) == 3


def test_compare_errors(cfg: Config) -> None:
    ws = Workspace(cfg.workspace)
    with pytest.raises(EvalError) as err:
        compare(ws, domain="email", split="test")
    assert err.value.code == "no_run"
    with pytest.raises(EvalError):
        resolve_run(ws, "nowhere")
    with pytest.raises(EvalError):
        compare(ws)
