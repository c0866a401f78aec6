"""``prore corpus build|load|show`` through the real entry point; bad input is one line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from indexing.corpora.files import corpus_manifest
from indexing.corpora.fixtures import write_enron_fixture, write_esci_fixture
from indexing.workspace import Workspace
from prore.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse usage errors exit from inside parse_args
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def test_build_then_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(tmp_path)
    rc, out, _ = _run(capsys, "--workspace", ws, "corpus", "build", "email", "--size", "1500", "--seed", "4")
    assert (
        rc == 0 and "1,500 emails" in out and "docs/s" in out and str(tmp_path / "corpora" / "email") in out
    )
    manifest = corpus_manifest(Workspace(tmp_path), "email")
    assert (manifest["source"], manifest["seed"], manifest["size"], manifest["rows"]) == (
        "generated",
        4,
        1500,
        1500,
    )
    assert manifest["generator_version"] and manifest["vocab"]
    rc, out, _ = _run(capsys, "--workspace", ws, "corpus", "show", "email", "--n", "2")
    assert rc == 0 and "seed: 4" in out and out.count("--- E") == 2
    assert "--- E00001" in out and "subject: " in out


def test_build_is_reproducible_across_chunk_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prints = []
    for chunk in ("250", "10000"):
        rc, _, _ = _run(
            capsys,
            "--workspace",
            str(tmp_path / chunk),
            "corpus",
            "build",
            "ecommerce",
            "--size",
            "1000",
            "--chunk-rows",
            chunk,
        )
        assert rc == 0
        prints.append(corpus_manifest(Workspace(tmp_path / chunk), "ecommerce"))
    assert prints[0]["fingerprint"] == prints[1]["fingerprint"] and prints[0]["parts"] == 4


def test_load_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(tmp_path / "ws")
    fx = write_esci_fixture(tmp_path / "esci", n=9)
    rc, out, _ = _run(
        capsys,
        "--workspace",
        ws,
        "corpus",
        "load",
        "esci",
        "--products",
        str(fx.products),
        "--reviews",
        str(fx.reviews),
        "--meta",
        str(fx.meta),
    )
    assert rc == 0 and "7 products" in out and "no_price: 1" in out
    manifest = corpus_manifest(Workspace(Path(ws)), "ecommerce")
    assert manifest["source"] == "esci"
    ex = write_enron_fixture(tmp_path / "enron", n=8)
    rc, out, _ = _run(
        capsys, "--workspace", ws, "corpus", "load", "enron", "--maildir", str(ex.maildir), "--limit", "5"
    )
    assert rc == 0 and "5 emails" in out
    assert corpus_manifest(Workspace(Path(ws)), "email")["rows"] == 5
    copy = ex.maildir / ex.paths[0].parts[0] / "all_documents" / "1."
    copy.parent.mkdir()
    copy.write_bytes((ex.maildir / ex.paths[0]).read_bytes())
    rc, out, _ = _run(capsys, "--workspace", ws, "corpus", "load", "enron", "--maildir", str(ex.maildir))
    assert rc == 0 and "8 emails" in out and "duplicate_message: 1" in out
    rc, out, _ = _run(
        capsys,
        "--workspace",
        ws,
        "corpus",
        "load",
        "enron",
        "--maildir",
        str(ex.maildir),
        "--keep-duplicates",
    )
    manifest = corpus_manifest(Workspace(Path(ws)), "email")
    assert rc == 0 and "9 emails" in out and manifest["keep_duplicates"] is True and manifest["rows"] == 9
    rc, _, err = _run(
        capsys, "--workspace", ws, "corpus", "load", "enron", "--maildir", str(ex.maildir.parent)
    )
    expected = f"{ex.maildir.parent} holds a maildir instead of being one; pass --maildir {ex.maildir}"
    assert rc == 2 and err.strip() == f"error maildir_root: {expected}"


@pytest.mark.parametrize(
    "argv",
    [
        ("corpus", "build", "ecommerce", "--size", "abc"),
        ("corpus", "build", "ecommerce", "--size", "0"),
        ("corpus", "build", "ecommerce"),
        ("corpus", "build", "music", "--size", "10"),
        ("corpus", "build", "email", "--size", "10", "--seed", "-1"),
        ("corpus", "show", "email"),
        ("corpus", "show", "email", "--n", "many"),
        ("corpus", "load", "enron", "--maildir", "no-such-dir"),
        ("corpus", "load", "esci", "--products", "p.parquet", "--reviews", "r.jsonl"),
        ("corpus", "load", "esci", "--products", "p.parquet"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    rc, out, err = _run(capsys, "--workspace", str(tmp_path), *argv)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error "), err


def test_broken_load_is_one_line_and_keeps_the_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(tmp_path / "ws")
    assert _run(capsys, "--workspace", ws, "corpus", "build", "ecommerce", "--size", "50")[0] == 0
    before = corpus_manifest(Workspace(Path(ws)), "ecommerce")
    fx = write_esci_fixture(tmp_path / "esci", n=6, broken="json")
    rc, _, err = _run(
        capsys,
        "--workspace",
        ws,
        "corpus",
        "load",
        "esci",
        "--products",
        str(fx.products),
        "--reviews",
        str(fx.reviews),
        "--meta",
        str(fx.meta),
    )
    assert rc == 2 and err.strip().splitlines()[-1].startswith("error bad_record: ")
    assert str(fx.broken_at) in err
    assert corpus_manifest(Workspace(Path(ws)), "ecommerce") == before


def test_show_reports_the_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(tmp_path / "ws")
    ex = write_enron_fixture(tmp_path / "enron", n=8)
    user = ex.maildir / ex.paths[0].parts[0]
    (user / "all_documents").mkdir()
    (user / "all_documents" / "1.").write_bytes((ex.maildir / ex.paths[0]).read_bytes())
    undated = re.sub(
        rb"(?m)^Date: .*$",
        b"Date: Mon, 31 Dec 1979 16:00:00 -0800 (PST)",
        (ex.maildir / ex.paths[1]).read_bytes().replace(b"Message-ID: <", b"Message-ID: <undated."),
        count=1,
    )
    (user / "all_documents" / "2.").write_bytes(undated)
    rc, _, _ = _run(capsys, "--workspace", ws, "corpus", "load", "enron", "--maildir", str(ex.maildir))
    assert rc == 0
    rc, out, _ = _run(capsys, "--workspace", ws, "corpus", "show", "email", "--n", "1")
    dates = ex.source.column("date").to_pylist()
    assert rc == 0
    assert (
        "  load: read 10, loaded 8, dropped 1 (placeholder_date: 1), deduplicated 1 (duplicate_message: 1)"
        in out.splitlines()
    )
    assert f"date {min(dates)} .. {max(dates)}" in out
    empty = next(line for line in out.splitlines() if line.startswith("  empty: "))
    assert "body" not in empty and "subject" not in empty
    assert "extra columns (extras.parquet, not indexed): message_id, to, cc, bcc, copies" in out
    assert out.count("--- E") == 1 and "  copies: " in out and "  message_id: <" in out
    assert "dropped" not in corpus_manifest(Workspace(Path(ws)), "email")
