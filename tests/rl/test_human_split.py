"""The hand-written ``human`` split: its data files, its judgements, and ``prore eval --split human``.

The workspace is the tests' own (a generated labeled corpus of each domain, indexed with the hashing
embedder: real chDB, Milvus Lite and BM25, quick to build); relevance is checked against an independent
computation over the corpus files and the label table in Python.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from indexing.config import Config
from indexing.corpora import generate_labeled
from indexing.corpora.files import iter_corpus, read_labels, write_corpus
from indexing.schema import schema_for
from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets.errors import BenchError
from rl.datasets.human import (
    HUMAN_SPLIT,
    LABELED_FIELDS,
    HumanDataError,
    data_path,
    facet_vocabulary,
    load_human,
    read_requests,
    resolve,
)
from rl.datasets.store import SPLITS, load_split
from rl.eval.commands import EVAL_SPLITS

DOMAINS = ("ecommerce", "email")
ROWS = 600
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def human_cfg(workspace_config: Callable[..., Config]) -> Config:
    """Both corpora (generated, with their label tables) indexed with the hashing embedder."""
    from indexing.build import build_index

    cfg = workspace_config("human", text="hashing", image="hashing")
    ws = Workspace(cfg.workspace)
    for domain in DOMAINS:
        meta = {"generator": domain, "size": ROWS, "seed": 0}
        write_corpus(ws, schema_for(domain), generate_labeled(domain, ROWS, seed=0), meta)
        build_index(cfg, domain, progress=False)
    return cfg


@pytest.fixture(scope="module")
def config_file(human_cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``--config`` file naming the test workspace (its chDB path and database)."""
    path = tmp_path_factory.mktemp("human-config") / "config.yaml"
    data = {
        "workspace": str(human_cfg.workspace),
        "clickhouse": {
            "chdb_path": human_cfg.clickhouse.chdb_path,
            "database": human_cfg.clickhouse.database,
        },
        "embedder": {"text": "hashing", "image": "hashing"},
    }
    path.write_text(yaml.safe_dump(data))
    return path


# -- the data files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", DOMAINS)
def test_data_files_parse_and_validate(domain: str) -> None:
    requests = read_requests(domain)  # every WHERE validated, every facet resolved
    assert len(requests) >= 60
    assert len({r.id for r in requests}) == len(requests)
    assert len({r.nl.strip().lower() for r in requests}) == len(requests)
    vocab = facet_vocabulary(domain)
    for req in requests:
        for ref in [r for group in req.must for r in group] + list(req.must_not):
            assert ref.split("/", 1)[-1] in vocab
            assert resolve(domain, ref)
    levels = {r.level for r in requests}
    assert levels == {"L1", "L2", "L3"}
    shapes = {m for r in requests for m in r.modalities}
    assert {"structured", "text"} <= shapes and ("image" in shapes) == (domain == "ecommerce")
    assert any(r.must_not for r in requests) and any(len(g) > 1 for r in requests for g in r.must)


def test_data_files_are_package_data() -> None:
    for domain in DOMAINS:
        packaged = resources.files("rl.datasets.human") / f"{domain}.jsonl"
        assert packaged.is_file() and Path(str(packaged)) == data_path(domain)
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    assert any(fnmatch.fnmatch("ecommerce.jsonl", p) for p in patterns)


@pytest.mark.parametrize("domain", DOMAINS)
def test_labeled_fields_and_facets_are_what_the_generators_write(domain: str) -> None:
    labels = pa.concat_tables([b.labels for b in generate_labeled(domain, 1500, seed=3)])
    fields = set(labels.column("field").to_pylist())
    assert fields <= {f for fs in LABELED_FIELDS[domain].values() for f in fs}
    vocab = facet_vocabulary(domain)
    for field_name, facet in set(
        zip(labels.column("field").to_pylist(), labels.column("facet").to_pylist(), strict=True)
    ):
        assert field_name in vocab[facet], (field_name, facet)


GOOD = {"id": "x-1", "nl": "sony headphones", "where": "brand = 'Sony'", "must": [], "must_not": []}


@pytest.mark.parametrize(
    ("line", "code", "words"),
    [
        ("{not json", "human_line", ["line 2", "JSON"]),
        ('["a list"]', "human_line", ["JSON object"]),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "must"} | {"id": "x-2"}),
            "human_line",
            ["missing must"],
        ),
        (json.dumps(GOOD | {"id": "x-2", "gold": "P00001"}), "human_line", ["unknown gold"]),
        (json.dumps(GOOD | {"id": "x-2", "must": "headphones.bass"}), "human_line", ["must"]),
        (json.dumps(GOOD | {"id": "x-2", "must": [[]]}), "human_line", ["must group"]),
        (
            json.dumps(GOOD | {"id": "x-2", "must": ["headphones.treble"]}),
            "human_facet",
            ["headphones.treble"],
        ),
        (json.dumps(GOOD | {"id": "x-2", "must_not": ["image/headphones.bass"]}), "human_facet", ["image"]),
        (json.dumps(GOOD | {"id": "x-2", "where": "price <"}), "human_where", ["price <"]),
        (json.dumps(GOOD | {"id": "x-2", "where": "wattage > 5"}), "human_where", ["wattage"]),
        (
            json.dumps(GOOD | {"id": "x-2", "where": "price < 5; DROP TABLE products"}),
            "human_where",
            ["DROP"],
        ),
        (json.dumps(GOOD | {"id": "x-2", "where": "id IN <text_1>"}), "human_where", ["<text_1>"]),
        (json.dumps(GOOD | {"id": "x-2", "where": "release_date > today()"}), "human_where", ["today"]),
        (json.dumps(GOOD | {"id": "x-2", "where": ""}), "human_line", ["empty"]),
        (json.dumps(GOOD), "human_duplicate", ["x-1", "line 1"]),
    ],
)
def test_bad_lines_are_one_line_typed_errors(tmp_path: Path, line: str, code: str, words: list[str]) -> None:
    path = tmp_path / "ecommerce.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(HumanDataError) as info:
        read_requests("ecommerce", path)
    err = info.value
    assert err.code == code
    text = err.one_line()
    assert "\n" not in text and text.startswith(f"error {code}: ecommerce.jsonl line 2")
    for word in words:
        assert word in text


# -- relevance on a real workspace -------------------------------------------------------------------


def _expected(cfg: Config, domain: str, keep: Callable[[dict[str, Any], set[str]], bool]) -> list[str]:
    """The relevant ids computed in Python from the corpus files and the label table alone."""
    ws = Workspace(cfg.workspace)
    labels = read_labels(ws, domain)
    assert labels is not None
    keys: dict[str, set[str]] = {}
    for doc, f, facet in zip(
        *(labels.column(c).to_pylist() for c in ("doc_id", "field", "facet")), strict=True
    ):
        keys.setdefault(doc, set()).add(f"{f}/{facet}")
    rows = [r for t in iter_corpus(ws, schema_for(domain)) for r in t.to_pylist()]
    return sorted(r["id"] for r in rows if keep(r, keys.get(r["id"], set())))


def test_relevant_sets_match_a_hand_check(human_cfg: Config, tmp_path: Path) -> None:
    lines = [
        {"id": "h-1", "nl": "headphones under 200 with bass in the review, not black",
         "where": "category = 'headphones' AND price < 200", "must": ["review/headphones.bass"],
         "must_not": ["visual:color=black"]},
        {"id": "h-2", "nl": "speakers that are loud or waterproof, any field", "where": "",
         "must": [["speakers.loudness", "speakers.waterproof"]], "must_not": []},
        {"id": "h-3", "nl": "in stock sony or bose", "where": "brand IN ('Sony', 'Bose') AND in_stock = true",
         "must": [], "must_not": ["general.stopped_working"]},
        {"id": "h-4", "nl": "nothing matches", "where": "price < 0", "must": [], "must_not": []},
    ]  # fmt: skip
    path = tmp_path / "ecommerce.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    human = load_human(human_cfg, "ecommerce", path=path)

    def any_field(keys: set[str], facet: str) -> bool:
        return any(k.endswith("/" + facet) for k in keys)

    expect = {
        "h-1": _expected(human_cfg, "ecommerce", lambda r, k: r["category"] == "headphones" and r["price"] < 200
                         and "review/headphones.bass" in k and "image/visual:color=black" not in k),
        "h-2": _expected(human_cfg, "ecommerce", lambda r, k: any_field(k, "speakers.loudness")
                         or any_field(k, "speakers.waterproof")),
        "h-3": _expected(human_cfg, "ecommerce", lambda r, k: r["brand"] in ("Sony", "Bose") and r["in_stock"]
                         and not any_field(k, "general.stopped_working")),
    }  # fmt: skip
    got = {i.qid: i for i in human.instances}
    assert human.skipped == ("h-4",) and "skipped 1" in human.summary_line() and "h-4" in human.summary_line()
    assert set(got) == set(expect)
    for qid, ids in expect.items():
        assert ids, qid  # the case is only a check when it has relevant documents
        inst = got[qid]
        assert list(inst.relevant_ids) == ids and inst.relevant_n == len(ids) and not inst.relevant_capped
        assert inst.gold_id == ids[0] and inst.split == HUMAN_SPLIT
    assert got["h-1"].level == "L3" and got["h-1"].modalities == ("image", "structured", "text")
    assert got["h-2"].level == "L3" and got["h-2"].modalities == ("text",)
    assert json.loads(got["h-3"].program) == {
        "sql": "SELECT DISTINCT id FROM products WHERE brand IN ('Sony', 'Bose') AND in_stock = true",
        "retrieval_list": [],
    }
    assert human.identity["version"] == HUMAN_SPLIT and human.identity["kept"] == 3


def test_a_where_the_store_refuses_names_its_line(human_cfg: Config, tmp_path: Path) -> None:
    path = tmp_path / "ecommerce.jsonl"
    rows = [GOOD, GOOD | {"id": "x-2", "where": "toYear(brand) = 2020"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    with pytest.raises(HumanDataError) as info:
        load_human(human_cfg, "ecommerce", path=path)
    assert info.value.code == "human_where" and "line 2 (x-2)" in info.value.one_line()


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_packaged_split_loads_with_few_skips(human_cfg: Config, domain: str) -> None:
    human = load_human(human_cfg, domain)
    assert human.total == len(read_requests(domain))
    assert len(human.instances) >= 0.9 * human.total, human.summary_line()
    for inst in human.instances:
        assert inst.relevant_n and inst.gold_id == inst.relevant_ids[0]


# -- evaluation --------------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str, str]:
    rc = main(["--config", str(config), *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_eval_bm25_on_the_human_split(capsys: pytest.CaptureFixture[str], config_file: Path) -> None:
    assert HUMAN_SPLIT in EVAL_SPLITS and HUMAN_SPLIT not in SPLITS
    rc, out, err = _cli(
        capsys, config_file, "eval", "ecommerce", "--method", "bm25", "--split", "human", "--quiet"
    )
    assert rc == 0, err
    assert "human split: kept" in out and "read P@1 and nDCG@10" in out
    run_dir = Path(
        next(line for line in out.splitlines() if line.startswith("report: ")).removeprefix("report: ")
    )
    assert run_dir.parts[-3:-1] == ("human", "bm25")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["split"] == "human" and summary["graded"]["available"]
    assert summary["overall"]["n"] >= 60 and summary["meta"]["benchmark"]["version"] == "human"
    assert summary["overall"]["metrics"]["ndcg@10"]["mean"] > 0
    queries = [json.loads(x) for x in (run_dir / "queries.jsonl").read_text().splitlines()]
    assert sum(bool(q["ids"]) for q in queries) == len(queries)
    assert "must not be tuned to" in (run_dir / "summary.md").read_text()


def test_oracle_refuses_the_human_split(capsys: pytest.CaptureFixture[str], config_file: Path) -> None:
    rc, _, err = _cli(capsys, config_file, "eval", "email", "--method", "oracle", "--split", "human")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error no_gold_program:")


def test_every_baseline_runs_on_the_human_split(human_cfg: Config) -> None:
    from rl.eval.methods import MethodContext
    from rl.eval.runner import evaluate

    instances = list(load_human(human_cfg, "email").instances)
    ctx = MethodContext(human_cfg, "email")
    try:
        for method in ("bm25", "dense", "rrf", "self-query", "sql-only"):
            run = evaluate(human_cfg, "email", method, instances, split=HUMAN_SPLIT, ctx=ctx, progress=False)
            assert len(run.results) == len(instances)
            assert all(r.error is None for r in run.results), method
            assert sum(r.scores["ndcg@10"] for r in run.results) > 0, method
    finally:
        ctx.close()


# -- never trained on ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthesized(human_cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A small benchmark of both domains synthesized on the test index."""
    from rl.datasets import SynthConfig, synthesize
    from rl.datasets.context import BenchContext
    from serving.engine import Engine

    ws = Workspace(tmp_path_factory.mktemp("human-bench"))
    for domain in DOMAINS:
        engine = Engine.open(human_cfg, domain)

        def opener(c: Config, d: str, s: SynthConfig, engine: Engine = engine) -> BenchContext:
            return BenchContext(c, d, engine, seed=s.seed, sizes=s.sizes, progress=False)

        try:
            scfg = SynthConfig(sizes={"train": 40, "test": 4, "ood": 4}, seed=5, progress=False)
            synthesize(human_cfg, domain, scfg, out=ws, opener=opener)
        finally:
            engine.close()
    yield ws


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


@pytest.mark.parametrize("domain", DOMAINS)
def test_no_human_request_is_in_the_train_split(synthesized: Workspace, domain: str) -> None:
    train = load_split(synthesized, domain, "train")
    assert len(train) == 40
    trained = {_norm(i.nl) for i in train}
    human = {_norm(r.nl) for r in read_requests(domain)}
    assert not trained & human
    assert not any(h in t for h in human if len(h.split()) >= 3 for t in trained)
    with pytest.raises(BenchError, match="unknown split 'human'"):
        load_split(synthesized, domain, HUMAN_SPLIT)


def test_only_evaluation_reads_the_human_split() -> None:
    """Training, prompts, exemplars and the reward service read benchmarks through ``load_split``, which never
    returns the human split; the only code that may load it is evaluation's."""
    allowed = {"rl/datasets/human/__init__.py", "rl/eval/commands.py", "rl/eval/report.py"}
    readers = set()
    for package in ("core", "indexing", "serving", "rl", "prore", "operators"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "rl.datasets.human" in text or "load_human" in text or "human.jsonl" in text:
                readers.add(path.relative_to(ROOT).as_posix())
    assert readers <= allowed, readers - allowed
