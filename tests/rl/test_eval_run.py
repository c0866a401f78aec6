"""``prore eval`` and ``prore eval compare`` end to end on the session's indexed corpus.

The benchmark is the workspace's own when one was synthesized; otherwise a small one is written
from programs run on the corpus (each gold id is what its program ranks first, as synthesis keeps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets.store import Instance, load_split, write_bench
from rl.eval.report import LEVEL_PNG, MODALITY_PNG, QUERIES, SUMMARY, TABLE


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _program_instances(cfg: Config, split: str, n: int, offset: int) -> list[Instance]:
    from serving.dsl import parse_program
    from serving.engine.engine import Engine

    engine = Engine.open(cfg, "ecommerce")
    table = engine.handle.table
    rows = engine.handle.sql.query(
        f"SELECT id, brand, color, title FROM {table} ORDER BY cityHash64(id) LIMIT {n} OFFSET {offset}"
    )
    out = []
    for i, (_, brand, color, title) in enumerate(rows):
        level, sql = (
            ("L2", f"brand = {_quote(brand)}")
            if i % 2
            else ("L3", f"(brand = {_quote(brand)} OR color = {_quote(color)})")
        )
        program = json.dumps(
            {
                "sql": f"SELECT id FROM products WHERE {sql} AND id IN <text_1>",
                "retrieval_list": [{"type": "text", "field": "title", "query": title}],
            }
        )
        top = engine.execute(parse_program(program), 20).ids
        assert top
        out.append(
            Instance(
                qid=f"{split}-{i:03d}", split=split, domain="ecommerce", nl=f"{title} from {brand}", program=program,
                gold_id=top[0], level=level, modalities=("structured", "text"), family="test",
                operators=("=", "AND", "id IN <text>"), tree="{}",
            )
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def bench_cfg(small_index_cfg: Config) -> Config:
    ws = Workspace(small_index_cfg.workspace)
    try:
        load_split(ws, "ecommerce", "test")
    except Exception:
        splits = {
            "train": _program_instances(small_index_cfg, "train", 2, 0),
            "test": _program_instances(small_index_cfg, "test", 10, 2),
            "ood": _program_instances(small_index_cfg, "ood", 4, 12),
        }
        write_bench(ws, "ecommerce", splits, {"generator": "programs written by the eval tests"})
    return small_index_cfg


def _cli(capsys: pytest.CaptureFixture[str], cfg: Config, *argv: str) -> tuple[int, str, str]:
    rc = main(["--workspace", str(cfg.workspace), *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _run_dir(out: str) -> Path:
    line = next(line for line in out.splitlines() if line.startswith("report: "))
    return Path(line.removeprefix("report: "))


def test_eval_writes_a_report(capsys: pytest.CaptureFixture[str], bench_cfg: Config) -> None:
    rc, out, err = _cli(
        capsys,
        bench_cfg,
        "eval",
        "ecommerce",
        "--method",
        "oracle",
        "--limit",
        "8",
        "--quiet",
        "--resamples",
        "200",
    )
    assert rc == 0, err
    assert "| overall | 8 |" in out
    run_dir = _run_dir(out)
    for name in (SUMMARY, TABLE, QUERIES, LEVEL_PNG, MODALITY_PNG):
        assert (run_dir / name).is_file()
    summary = json.loads((run_dir / SUMMARY).read_text())
    assert summary["method"] == "oracle" and summary["uses_gold"]
    assert summary["overall"]["metrics"]["hit@1"]["mean"] == 1.0
    assert summary["overall"]["metrics"]["exec"]["mean"] == 1.0
    records = [json.loads(line) for line in (run_dir / QUERIES).read_text().splitlines()]
    assert len(records) == 8 and all(r["rank"] == 1 for r in records)

    import matplotlib.image

    assert matplotlib.image.imread(str(run_dir / LEVEL_PNG)).ndim == 3


def test_eval_ood_and_compare(capsys: pytest.CaptureFixture[str], bench_cfg: Config) -> None:
    for method in ("bm25", "sql-only"):
        rc, out, err = _cli(
            capsys,
            bench_cfg,
            "eval",
            "ecommerce",
            "--method",
            method,
            "--split",
            "ood",
            "--quiet",
            "--resamples",
            "100",
        )
        assert rc == 0, err
        summary = json.loads((_run_dir(out) / SUMMARY).read_text())
        assert summary["split"] == "ood" and summary["overall"]["n"] == len(
            load_split(Workspace(bench_cfg.workspace), "ecommerce", "ood")
        )
    rc, out, err = _cli(capsys, bench_cfg, "eval", "compare", "--domain", "ecommerce", "--split", "ood")
    assert rc == 0, err
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert any(r.startswith("| bm25 |") for r in rows) and any(
        r.startswith("| sql-only (gold) |") for r in rows
    )
    compare_dir = Path(
        next(line for line in out.splitlines() if line.startswith("comparison: ")).split(": ", 1)[1]
    )
    assert (compare_dir / "compare.md").is_file() and (compare_dir / "compare.png").is_file()


def _queries(run_dir: Path) -> list[dict[str, object]]:
    """A run's per-query records without their timings."""
    records = [json.loads(line) for line in (run_dir / QUERIES).read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_ms")} for r in records]


def test_several_methods_in_one_call_write_what_separate_calls_write(
    capsys: pytest.CaptureFixture[str], bench_cfg: Config
) -> None:
    """``--method`` repeated: one report per method (a repeat counted once), the same queries and rankings as
    one call per method, with the index and engines opened once."""
    flags = ("--split", "ood", "--quiet", "--resamples", "50")
    alone = {}
    for method in ("bm25", "dense"):
        rc, out, err = _cli(capsys, bench_cfg, "eval", "ecommerce", "--method", method, *flags)
        assert rc == 0, err
        alone[method] = _queries(_run_dir(out))
    rc, out, err = _cli(capsys, bench_cfg, "eval", "ecommerce", "--method", "bm25", "--method", "dense",
                        "--method", "bm25", *flags)  # fmt: skip
    assert rc == 0, err
    dirs = [Path(line.removeprefix("report: ")) for line in out.splitlines() if line.startswith("report: ")]
    assert [json.loads((d / SUMMARY).read_text())["method"] for d in dirs] == ["bm25", "dense"]
    assert {m: _queries(d) for m, d in zip(("bm25", "dense"), dirs, strict=True)} == alone
