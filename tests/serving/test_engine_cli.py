"""``prore execute`` on the session workspace: the DESIGN.md example, stdin, formats, and one-line errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from indexing.config import Config
from prore.cli import main
from serving.dsl import parse_program
from serving.engine import Engine

DESIGN_EXAMPLE = {
    "sql": "SELECT DISTINCT id FROM products WHERE price < 200 AND (brand = 'Sony' OR brand = 'Bose') "
    "AND id IN <text_1> AND id NOT IN <image_2>",
    "retrieval_list": [
        {"type": "text", "field": "review", "query": "great noise cancelling"},
        {"type": "image", "field": "image", "query": "matte white over-ear headphones"},
    ],
}


def run(
    cfg: Config, *args: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> int:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return main(["--workspace", str(cfg.workspace), "execute", *args])


def write(tmp_path: Path, program: object) -> str:
    path = tmp_path / "program.json"
    path.write_text(program if isinstance(program, str) else json.dumps(program))
    return str(path)


def test_design_example_as_json(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run(small_index_cfg, "--program", write(tmp_path, DESIGN_EXAMPLE), "--format", "json", "--k", "5")
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    engine = Engine.open(small_index_cfg, "ecommerce")
    expected = engine.execute(parse_program(DESIGN_EXAMPLE), k=5)
    assert out["ids"] == list(expected.ids) and out["domain"] == "ecommerce"
    assert set(out["candidates"]) == {"text_1", "image_2"}
    for row in out["results"]:
        assert set(row) == {"id", "score", "title", "brand", "price"}
        assert row["brand"] in ("Sony", "Bose") and row["price"] < 200


def test_table_from_stdin_with_fields(
    small_index_cfg: Config, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    program = {
        "sql": "SELECT id FROM products WHERE id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "title", "query": "wireless headphones"}],
    }
    assert (
        run(
            small_index_cfg,
            "--fields",
            "category,rating",
            "--k",
            "3",
            stdin=json.dumps(program),
            monkeypatch=monkeypatch,
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["rank", "id", "score", "category", "rating"]
    assert [line.split()[0] for line in lines[1:4]] == ["1", "2", "3"]
    assert lines[-2].startswith("candidates: text_1: 20") and lines[-1].startswith("timings (ms):")


def test_emails_are_routed_by_table(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = {
        "sql": "SELECT id FROM emails WHERE is_read = false AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "subject", "query": "payments outage"}],
    }
    assert run(small_index_cfg, "--program", write(tmp_path, program), "--format", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["domain"] == "email" and all(
        set(r) == {"id", "score", "subject", "sender", "date"} for r in out["results"]
    )


def test_the_corpus_is_an_explicit_argument(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--domain`` names the corpus; the table check stays validation's (a products program on the email
    corpus is refused with its code). Without it, the table is read from the SQL's syntax tree: a
    string literal that looks like a FROM clause does not move the program to another corpus."""
    program = {"sql": "SELECT id FROM products WHERE brand = 'x FROM emails'", "retrieval_list": []}
    path = write(tmp_path, program)
    assert run(small_index_cfg, "--program", path, "--domain", "ecommerce", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["domain"] == "ecommerce"
    assert run(small_index_cfg, "--program", path, "--domain", "email") == 2
    assert capsys.readouterr().err.startswith("error unknown_table: ")
    emails = {"sql": "SELECT id FROM emails WHERE title = 'FROM products'", "retrieval_list": []}
    assert run(small_index_cfg, "--program", write(tmp_path, emails)) == 2
    assert capsys.readouterr().err.startswith("error unknown_column: ")  # validated against emails


@pytest.mark.parametrize(
    ("program", "code"),
    [
        ("this is not json", "not_json"),
        (
            {"sql": "SELECT id FROM products; DROP TABLE products", "retrieval_list": []},
            "multiple_statements",
        ),
        (
            {
                "sql": "SELECT id FROM products WHERE id IN <text_2>",
                "retrieval_list": [{"type": "text", "field": "title", "query": "x"}],
            },
            "placeholder_out_of_range",
        ),
        ({"sql": "SELECT id FROM users", "retrieval_list": []}, "unknown_table"),
        ({"sql": "SELECT id FROM products WHERE price < 'cheap'", "retrieval_list": []}, "exec_failed"),
    ],
)
def test_a_bad_program_exits_2_with_one_line(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str], program: object, code: str
) -> None:
    assert run(small_index_cfg, "--program", write(tmp_path, program)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error {code}: "), captured.err


def test_bad_flags_exit_2(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, DESIGN_EXAMPLE)
    assert run(small_index_cfg, "--program", path, "--fields", "title,colour") == 2
    assert capsys.readouterr().err.startswith("error unknown_field: ")
    assert run(small_index_cfg, "--program", str(tmp_path / "missing.json")) == 2
    assert capsys.readouterr().err.startswith("error no_program: ")
    assert run(small_index_cfg, "--program", path, "--k", "0") == 2
    assert capsys.readouterr().err.startswith("error bad_k: ")


def test_several_programs_run_in_one_process_as_they_run_alone(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--program`` repeated: each corpus's index opens once, the results are each program's own, in order."""
    email = {
        "sql": "SELECT id FROM emails WHERE is_read = false AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "subject", "query": "payments outage"}],
    }
    first, second = write(tmp_path, DESIGN_EXAMPLE), str(tmp_path / "email.json")
    Path(second).write_text(json.dumps(email))
    alone = []
    for path in (first, second):
        assert run(small_index_cfg, "--program", path, "--format", "json", "--k", "5") == 0
        alone.append(json.loads(capsys.readouterr().out))
    assert run(small_index_cfg, "--program", first, "--program", second, "--format", "json", "--k", "5") == 0
    together = json.loads(capsys.readouterr().out)
    assert [t["program_file"] for t in together] == [first, second]
    assert [(t["domain"], t["ids"], t["results"]) for t in together] == [
        (a["domain"], a["ids"], a["results"]) for a in alone
    ]
    assert run(small_index_cfg, "--program", first, "--program", second, "--k", "5") == 0
    tables = capsys.readouterr().out.split("--- ")[1:]
    assert [t.splitlines()[0] for t in tables] == [first, second]
    assert [t.splitlines()[1].split()[:3] for t in tables] == [["rank", "id", "score"]] * 2


def test_one_bad_program_among_several_prints_nothing(
    small_index_cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, DESIGN_EXAMPLE)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sql": "SELECT id FROM products WHERE price < 'cheap'", "retrieval_list": []}))
    assert run(small_index_cfg, "--program", good, "--program", str(bad)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error exec_failed: ")
