"""``prore eval`` on bad input: one line on stderr, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from prore.cli import main


def _run(capsys: pytest.CaptureFixture[str], ws: Path, *argv: str) -> tuple[int, list[str]]:
    rc = main(["--workspace", str(ws), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["eval", "ecommerce", "--method", "bm42"], "unknown_method", ["bm25", "oracle", "self-query"]),
        (["eval", "email", "--method", "bm25", "--split", "dev"], "unknown_split", ["test", "ood"]),
        (["eval", "email", "--method", "bm25"], "no_bench", ["prore bench"]),
        (["eval", "ecommerce", "--method", "dense", "--k", "2"], "config", ["rl.eval.k", "at least 3"]),
        (["eval", "ecommerce", "--method", "dense", "--resamples", "0"], "config", ["rl.eval.resamples"]),
        (["eval", "ecommerce", "--method", "dense", "--confidence", "1.5"], "config", ["rl.eval.confidence"]),
        (["eval", "compare", "--domain", "email"], "no_run", ["prore eval email"]),
        (["eval", "compare", "--domain", "books"], "corpus", ["ecommerce"]),
        (["eval", "compare", "no/such/run"], "no_run", ["no/such/run"]),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: str, words: list[str]
) -> None:
    rc, err = _run(capsys, tmp_path / "ws", *argv)
    assert rc == 2
    assert len(err) == 1 and err[0].startswith(f"error {code}:"), err
    for word in words:
        assert word in err[0]
    assert not (tmp_path / "ws" / "reports").exists()
