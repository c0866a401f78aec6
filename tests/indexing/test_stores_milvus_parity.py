"""With exact (FLAT) indexes, an index built on the real Milvus server answers programs exactly as the same
index on Milvus Lite: the same candidate lists, the same ranked ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("milvus", reason="needs the milvus-server extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")

from indexing.build import build_index
from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
from indexing.corpora import generate_labeled
from indexing.corpora.files import write_corpus
from indexing.errors import ProReError
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace
from serving.dsl import parse_program
from serving.engine import Engine
from tests.conftest import SMALL_CORPUS_ROWS

pytestmark = pytest.mark.server

GOLDEN = Path(__file__).parents[1] / "serving" / "data" / "golden_valid.jsonl"


def _programs() -> list[tuple[str, Any]]:
    cases = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen = [c for c in cases if c.get("table", "products") == "products" and c["program"]["retrieval_list"]]
    return [(c["name"], parse_program(c["program"])) for c in chosen]


def test_flat_indexes_answer_alike_on_lite_and_on_the_server(
    small_index_cfg: Config, milvus_standalone: str, tmp_path: Path, chdb_path: Path
) -> None:
    assert small_index_cfg.milvus.index_type == "FLAT"
    # The same corpus (generator, size, seed) and embedder as the session's Lite index, built on the server.
    server_cfg = Config(
        workspace=tmp_path,
        clickhouse=ClickHouseConfig(chdb_path=str(chdb_path), database="parity_server"),
        milvus=MilvusConfig(uri=milvus_standalone),
        embedder=EmbedderConfig(text="minilm", image="minilm"),
    )
    size, seed = SMALL_CORPUS_ROWS, 0
    meta = {"generator": PRODUCTS.domain, "size": size, "seed": seed}
    write_corpus(Workspace(tmp_path), PRODUCTS, generate_labeled(PRODUCTS.domain, size, seed=seed), meta)
    build_index(server_cfg, PRODUCTS.domain, progress=False)

    programs = _programs()
    assert len(programs) >= 10
    with Engine.open(small_index_cfg, "ecommerce") as lite, Engine.open(server_cfg, "ecommerce") as real:
        assert lite.handle.rows == real.handle.rows == size
        answers = {name: (_answer(lite, program), _answer(real, program)) for name, program in programs}
    differ = [name for name, (a, b) in answers.items() if a != b]
    assert not differ, differ
    assert sum(1 for a, _ in answers.values() if a[0] == "ok") >= 10


def _answer(engine: Engine, program: Any) -> tuple[Any, ...]:
    """What a program returns (its candidate lists and ranked ids), or the code of its typed error."""
    try:
        result = engine.execute(program)
    except ProReError as exc:
        return ("error", exc.code)
    return ("ok", dict(result.candidates), result.ids)
