"""``prore eval compare`` on hand-made runs: recorded versions, refused or flagged mismatches, paired differences."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import main
from rl.eval.compare import compare
from rl.eval.errors import EvalError
from rl.eval.metrics import Relevant, score_query
from rl.eval.report import load_summary, write_run
from rl.eval.runner import EvalRun, QueryResult, query_digests

META: dict[str, Any] = {
    "benchmark": {"version": "v0001", "fingerprint": "b1"},
    "index_version": "v0003",
}


def _run(method: str, hits: Sequence[bool], *, qids: Sequence[str] | None = None, golds: Sequence[str] | None = None,
         meta: dict[str, Any] | None = META, domain: str = "email", split: str = "test",
         relevant: bool = False) -> EvalRun:  # fmt: skip
    """A run whose query ``i`` ranks its gold first when ``hits[i]``, else second (``X``); with ``relevant``, each
    query's relevant set is its gold and ``X``, so P@1 is 1.0 either way."""
    qids = list(qids or [f"q{i:03d}" for i in range(len(hits))])
    golds = list(golds or [f"E{i:03d}" for i in range(len(hits))])
    results = []
    for qid, gold, hit in zip(qids, golds, hits, strict=True):
        ranking = [gold, "X"] if hit else ["X", gold]
        s = score_query(ranking, gold, relevant=Relevant((gold, "X"), 2) if relevant else None)
        results.append(QueryResult(qid, "L1", "text", gold, s.rank, s.as_dict(), tuple(ranking), None))
    full = None if meta is None else {**meta, "queries": {"n": len(qids), **query_digests(qids, golds)}}
    return EvalRun(
        domain, split, method, 20, tuple(results), "2026-01-01T00:00:00+00:00", 1.0, meta=full or {}
    )


def _store(ws: Workspace, *runs: EvalRun) -> list[str]:
    return [str(write_run(ws, r, resamples=50)) for r in runs]


@pytest.fixture()
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws")


def test_paired_difference_on_matched_queries(ws: Workspace) -> None:
    base = [i % 2 == 0 for i in range(40)]  # 20 of 40
    better = [h or i % 4 == 1 for i, h in enumerate(base)]  # 10 more hits, never a loss
    dirs = _store(ws, _run("bm25", base), _run("rrf", better), _run("same", base))
    result = compare(ws, dirs, resamples=500)
    assert not result.mismatches
    rrf, same = result.paired
    assert (rrf.method, rrf.baseline, rrf.n, rrf.wins, rrf.losses) == ("rrf", "bm25", 40, 10, 0)
    hit1 = rrf.metrics["hit@1"]
    assert hit1.mean == pytest.approx(0.25) and 0.0 <= hit1.low < 0.25 < hit1.high <= 0.5
    assert rrf.metrics["mrr"].mean == pytest.approx(0.25 * 0.5)  # a miss here is rank 2: MRR 0.5
    # No difference on any query: the paired interval is exactly zero (unpaired ones would overlap widely).
    assert (same.metrics["hit@1"].mean, same.metrics["hit@1"].low, same.metrics["hit@1"].high) == (
        0.0,
        0.0,
        0.0,
    )
    assert (
        "Paired differences against bm25" in result.table and "| rrf | bm25 | 40 | +0.250 [" in result.table
    )
    against = compare(ws, dirs, baseline="rrf", resamples=100)
    assert [(r.method, r.metrics["hit@1"].mean) for r in against.paired] == [("bm25", -0.25), ("same", -0.25)]


def test_graded_metrics_are_paired_where_every_run_has_relevant_sets(ws: Workspace) -> None:
    base, better = [i % 2 == 0 for i in range(20)], [True] * 20
    graded = compare(ws, _store(ws, _run("bm25", base, relevant=True), _run("rrf", better, relevant=True)))
    p1 = graded.paired[0].metrics["p@1"]
    assert (p1.mean, p1.low, p1.high) == (0.0, 0.0, 0.0), "both rank a relevant document first on every query"
    assert graded.paired[0].metrics["hit@1"].mean == pytest.approx(0.5)
    assert "ΔP@1 [95% CI]" in graded.table and "ΔnDCG@10 [95% CI]" in graded.table
    other = Workspace(ws.root.parent / "gold-only")
    gold_only = compare(other, _store(other, _run("bm25", base), _run("rrf", better, relevant=True)))
    assert "p@1" not in gold_only.paired[0].metrics and "ΔP@1" not in gold_only.table, (
        "one run has no relevant sets"
    )


def test_pairs_follow_query_ids_not_positions(ws: Workspace) -> None:
    qids = [f"q{i:03d}" for i in range(10)]
    a = _run("a", [True] * 5 + [False] * 5, qids=qids)
    # The same queries stored in reverse order: b hits exactly where a does.
    b = _run("b", [False] * 5 + [True] * 5, qids=qids[::-1], golds=[f"E{i:03d}" for i in range(10)][::-1])
    result = compare(ws, _store(ws, a, b))
    assert result.paired[0].n == 10 and result.paired[0].metrics["hit@1"].mean == 0.0


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (lambda: _run("b", [True] * 8), "query ids"),  # a subset of the queries (--limit)
        (
            lambda: _run("b", [True] * 10, meta={**META, "index_version": "v0004"}),
            "index version (v0003, v0004)",
        ),
        (
            lambda: _run(
                "b", [True] * 10, meta={**META, "benchmark": {"version": "v0002", "fingerprint": "b2"}}
            ),
            "benchmark (b1, b2)",
        ),
        (lambda: _run("b", [True] * 10, golds=[f"E{i:03d}" for i in range(9)] + ["E999"]), "gold answers"),
        (
            lambda: _run("b", [True] * 10, meta=None),
            "benchmark (b1, unrecorded)",
        ),  # stored before runs kept it
        (lambda: _run("b", [True] * 10, split="ood"), "split (test, ood)"),
    ],
)
def test_mismatched_runs_are_refused_or_flagged(ws: Workspace, other: Any, field: str) -> None:
    dirs = _store(ws, _run("a", [True] * 5 + [False] * 5), other())
    with pytest.raises(EvalError) as err:
        compare(ws, dirs)
    assert err.value.code == "run_mismatch" and field in err.value.one_line()
    assert "--allow-mismatch" in err.value.one_line()
    flagged = compare(ws, dirs, allow_mismatch=True)
    assert field.split(" (")[0] in flagged.mismatches and "WARNING: not comparable" in flagged.table
    if field == "query ids":
        assert flagged.paired[0].n == 8  # paired on the shared queries only
    if field == "gold answers":
        assert flagged.paired[0].n == 9  # a query whose gold changed is not a pair


def test_evaluate_records_what_the_run_was_computed_on(tmp_path: Path) -> None:
    from rl.eval.methods import MethodSpec, Outcome
    from rl.eval.runner import evaluate
    from tests.rl.eval_support import instances

    def first(ctx: Any, batch: Sequence[Any], k: int) -> list[Outcome]:
        return [Outcome.ranked([inst.gold_id]) for inst in batch]

    insts = instances(6)
    cfg = Config(workspace=tmp_path / "ws")
    bench = {
        "version": "v0002",
        "fingerprint": "f00d",
        "seed": 3,
        "index_version": "v0001",
        "corpus_fingerprint": "c",
    }
    run = evaluate(cfg, "email", MethodSpec("first", first, ""), insts, split="ood", k=5, batch_size=2,
                   progress=False, benchmark=bench, meta={"limit": 6})  # fmt: skip
    meta = run.meta
    assert meta["method"] == "first" and meta["split"] == "ood" and meta["domain"] == "email"
    assert meta["benchmark"] == {
        k: bench[k] for k in ("version", "fingerprint", "seed", "index_version", "corpus_fingerprint")
    }
    assert meta["index_version"] is None  # no index was published in this workspace
    assert meta["queries"] == {"n": 6, **query_digests([i.qid for i in insts], [i.gold_id for i in insts])}
    assert meta["config"]["k"] == 5 and meta["config"]["batch_size"] == 2 and meta["config"]["limit"] == 6
    stored = load_summary(write_run(Workspace(cfg.workspace), run, resamples=20))
    assert stored["meta"] == meta
    fewer = evaluate(cfg, "email", MethodSpec("first", first, ""), insts[:5], progress=False)
    assert fewer.meta["queries"]["ids"] != meta["queries"]["ids"]


def test_cli_refuses_then_flags(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = _store(ws, _run("a", [True] * 10), _run("b", [True] * 10, meta={**META, "index_version": "v0009"}))
    rc = main(["--workspace", str(ws.root), "eval", "compare", *dirs])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error run_mismatch: ") and err.count("\n") == 1
    rc = main(["--workspace", str(ws.root), "eval", "compare", *dirs, "--allow-mismatch", "--baseline", "b"])
    out = capsys.readouterr().out
    assert rc == 0 and "WARNING: not comparable" in out and "| a | b | 10 | +0.000 [+0.000, +0.000]" in out


def test_pooled_seeds_claim_only_the_gain_every_seed_shows(ws: Workspace) -> None:
    base = [i % 2 == 0 for i in range(40)]  # 20 of 40
    better = [h or i % 4 == 1 for i, h in enumerate(base)]  # 10 more hits, never a loss
    dirs = _store(ws, _run("sft", base), _run("rl-s0", better), _run("rl-s1", better), _run("rl-s2", base))
    result = compare(ws, dirs, baseline="sft", pools={"both": ["rl-s0", "rl-s1"], "split": ["rl-s0", "rl-s2"]},
                     resamples=400)  # fmt: skip
    alone = {r.method: r.metrics["hit@1"] for r in result.paired}
    assert alone["rl-s0"].low > 0.0, "one seed's paired CI, over queries only, clears 0"
    both, split = result.pooled
    assert (both.method, both.runs, both.n, both.wins, both.losses) == ("both", 2, 40, 20, 0)
    assert both.metrics["hit@1"].mean == pytest.approx(0.25) and both.metrics["hit@1"].low > 0.0
    # Half the seeds gain nothing: the pooled CI, resampling the seeds too, reaches 0.
    assert split.metrics["hit@1"].mean == pytest.approx(0.125) and split.metrics["hit@1"].low == 0.0
    assert (
        "Pooled over runs against sft" in result.table
        and "| split (2 runs) | sft | 40 | +0.125 [+0.000," in result.table
    )
    stored = json.loads((result.path / "compare.json").read_text())
    assert [(p["method"], p["members"], p["runs"]) for p in stored["pooled"]] == [
        ("both", ["rl-s0", "rl-s1"], 2), ("split", ["rl-s0", "rl-s2"], 2)]  # fmt: skip


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("rl=rl-s0", "two or more methods"),
        ("rl-s0,rl-s1", "LABEL=METHOD"),
        ("rl=rl-s0,nope", "names nope"),
        ("rl=sft,rl-s0", "other than the baseline"),
    ],
)
def test_cli_pools_seeds_and_refuses_a_bad_pool(ws: Workspace, capsys: pytest.CaptureFixture[str], pool: str,
                                                message: str) -> None:  # fmt: skip
    dirs = _store(ws, _run("sft", [False] * 10), _run("rl-s0", [True] * 10), _run("rl-s1", [True] * 10))
    assert main(["--workspace", str(ws.root), "eval", "compare", *dirs, "--baseline", "sft",
                 "--pool", "rl=rl-s0,rl-s1"]) == 0  # fmt: skip
    assert "| rl (2 runs) | sft | 10 | +1.000 [+1.000, +1.000]" in capsys.readouterr().out
    rc = main(["--workspace", str(ws.root), "eval", "compare", *dirs, "--baseline", "sft", "--pool", pool])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error bad_pool: ") and message in err and err.count("\n") == 1
