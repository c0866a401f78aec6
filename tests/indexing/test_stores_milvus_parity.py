"""With exact (FLAT) indexes, an index built on the real Milvus server answers programs exactly as the same
index on Milvus Lite, with the id sets bound as query parameters or written as SQL literals
(``serving.sql.ids``), one program at a time or batched: the same candidate lists, ranked ids and scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("milvus", reason="needs the milvus-server extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")

from core.errors import ProReError
from indexing.build import build_index
from indexing.config import ClickHouseConfig, Config, MilvusConfig
from indexing.corpora import generate_labeled
from indexing.corpora.files import write_corpus
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace
from serving.dsl import parse_program
from serving.engine import Engine, ExecutionResult
from serving.settings import SqlSettings
from tests.conftest import SMALL_CORPUS_ROWS

pytestmark = pytest.mark.server

GOLDEN = Path(__file__).parents[1] / "serving" / "data" / "golden_valid.jsonl"
EXAMPLES = Path(__file__).parents[2] / "examples" / "programs"


def _programs() -> list[tuple[str, Any]]:
    """The golden programs and the example programs over the products corpus that retrieve something."""
    cases = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen = [c for c in cases if c.get("table", "products") == "products" and c["program"]["retrieval_list"]]
    examples = [
        (f.stem, json.loads(f.read_text(encoding="utf-8"))) for f in sorted(EXAMPLES.glob("ecommerce_*.json"))
    ]
    return [(c["name"], parse_program(c["program"])) for c in chosen] + [
        (n, parse_program(p)) for n, p in examples
    ]


def test_flat_indexes_answer_alike_on_lite_and_on_the_server_with_bound_and_literal_sql(
    small_index_cfg: Config, milvus_standalone: str, tmp_path: Path, chdb_path: Path
) -> None:
    assert small_index_cfg.milvus.index_type == "FLAT"
    # The same corpus (generator, size, seed) and embedder as the session's Lite index, built on the server.
    server_cfg = Config(
        workspace=tmp_path,
        clickhouse=ClickHouseConfig(chdb_path=str(chdb_path), database="parity_server"),
        milvus=MilvusConfig(uri=milvus_standalone),
        embedder=small_index_cfg.embedder,  # MiniLM, and the session's vector cache: its vectors are read
    )
    size, seed = SMALL_CORPUS_ROWS, 0
    meta = {"generator": PRODUCTS.domain, "size": size, "seed": seed}
    write_corpus(Workspace(tmp_path), PRODUCTS, generate_labeled(PRODUCTS.domain, size, seed=seed), meta)
    build_index(server_cfg, PRODUCTS.domain, progress=False)

    programs = _programs()
    assert len(programs) >= 10
    names = [name for name, _ in programs]
    answers: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    for store, cfg in (("lite", small_index_cfg), ("server", server_cfg)):
        for ids in ("literal", "bound"):
            with Engine.open(cfg, "ecommerce", sql_settings=SqlSettings(ids=ids)) as engine:
                assert engine.handle.rows == size
                answers[store, ids, "alone"] = [_answer(engine, program) for _, program in programs]
                engine.clear_caches()
                batch = engine.execute_many([program for _, program in programs])
                answers[store, ids, "batched"] = [_outcome(o) for o in batch]
    reference = answers["lite", "literal", "alone"]
    for key, got in answers.items():
        differ = [name for name, a, b in zip(names, reference, got, strict=True) if a != b]
        assert not differ, (key, differ)
    assert sum(1 for a in reference if a[0] == "ok") >= 10


def _answer(engine: Engine, program: Any) -> tuple[Any, ...]:
    """What a program returns (its candidate lists, ranked ids and scores), or the code of its typed error."""
    try:
        return _outcome(engine.execute(program))
    except ProReError as exc:
        return _outcome(exc)


def _outcome(outcome: ExecutionResult | ProReError) -> tuple[Any, ...]:
    if isinstance(outcome, ProReError):
        return ("error", outcome.code)
    return ("ok", dict(outcome.candidates), outcome.ids, outcome.scores)
