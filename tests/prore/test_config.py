"""One config file for every layer: the documented example, typed one-line errors, and the sections in use."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import ConfigError
from indexing.config import LAYER_KEYS, SECTIONS, Config, register_section
from prore.cli import main
from prore.config import LAYERS, as_mapping, load_config
from rl.settings import EvalSettings, RlSettings
from serving.dsl import DslLimits
from serving.engine import CacheSizes
from serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "config.example.yaml"


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_the_example_documents_every_key_of_every_layer_with_its_default() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert raw == as_mapping(Config())  # every section, every key, every default
    assert [section.name for section in LAYERS] == list(LAYER_KEYS)  # prore composes every layer's section
    cfg = load_config(EXAMPLE)
    assert {"serving", "rl"} <= set(SECTIONS.names())  # registered by load_config
    assert cfg.section(ServingSettings) == ServingSettings()
    assert cfg.section(RlSettings) == RlSettings()
    assert (cfg.clickhouse, cfg.milvus, cfg.embedder) == (
        Config().clickhouse,
        Config().milvus,
        Config().embedder,
    )
    # A comment above every group of keys, as in a Helm values file: a key line follows a comment
    # or another key of its group.
    lines = [line for line in EXAMPLE.read_text().splitlines() if line.strip()]

    def depth(line: str) -> int:
        return len(line) - len(line.lstrip())

    for before, line in itertools.pairwise(lines):
        is_key = not line.lstrip().startswith("#") and not line.rstrip().endswith(":")
        if is_key:
            same_group = depth(before) == depth(line) and not before.rstrip().endswith(":")
            assert before.lstrip().startswith("#") or same_group, line


def test_values_reach_their_sections(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "serving": {"dsl": {"max_entries": 2, "k_ladder": [5, 10], "default_k": 10}, "engine": {"programs": 0}},
        "rl": {"eval": {"k": 5, "confidence": 0.9}},
        "embedder": {"text": "hashing"},
    })  # fmt: skip
    cfg = load_config(path)
    serving = cfg.section(ServingSettings)
    assert serving.dsl == DslLimits(max_entries=2, k_ladder=(5, 10), default_k=10)
    assert serving.engine == CacheSizes(programs=0)
    assert cfg.section(RlSettings).eval == EvalSettings(k=5, confidence=0.9)
    assert cfg.embedder.text == "hashing"
    assert Config().section(ServingSettings) == ServingSettings()  # a config built in code has the defaults
    assert cfg.with_section(ServingSettings()).section(ServingSettings) == ServingSettings()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"servng": {}}, "unknown top-level key 'servng' in config; known keys: workspace, clickhouse"),
        ({"serving": {"dls": {}}}, "unknown key serving.dls; known keys: api, dsl, engine, planner"),
        ({"serving": {"dsl": {"max_entry": 3}}}, "unknown key serving.dsl.max_entry; known keys: "),
        (
            {"rl": {"eval": {"K": 3}}},
            "unknown key rl.eval.K; known keys: batch_size, confidence, k, resamples, seed",
        ),
        (
            {"serving": {"dsl": {"max_entries": "eight"}}},
            "serving.dsl.max_entries must be an integer, got str 'eight'",
        ),
        (
            {"serving": {"dsl": {"max_entries": True}}},
            "serving.dsl.max_entries must be an integer, got bool True",
        ),
        ({"serving": {"dsl": {"k_ladder": 20}}}, "serving.dsl.k_ladder must be a list, got int 20"),
        (
            {"serving": {"dsl": {"k_ladder": [3, "x"]}}},
            "serving.dsl.k_ladder[1] must be an integer, got str 'x'",
        ),
        (
            {"serving": {"dsl": {"default_k": 7}}},
            "serving.dsl.default_k 7 must be one of serving.dsl.k_ladder",
        ),
        ({"serving": {"dsl": {"rerank_ladder": [3, 5]}}}, "serving.dsl.rerank_ladder must hold 0"),
        ({"serving": {"dsl": {"k_ladder": [20, 3]}}}, "serving.dsl.k_ladder must be increasing"),
        (
            {"serving": {"dsl": {"rrf_constant": 10}}},
            "serving.dsl.rrf_constant is the ranking contract's constant",
        ),
        ({"serving": {"dsl": {"max_nodes": 0}}}, "serving.dsl.max_nodes must be at least 1, got 0"),
        ({"serving": {"engine": {"searches": -1}}}, "serving.engine.searches must be 0 or more, got -1"),
        ({"serving": {"engine": []}}, "serving.engine must be a mapping, got list []"),
        ({"rl": {"eval": {"k": 2}}}, "rl.eval.k must be at least 3"),
        ({"rl": {"eval": {"confidence": 1.5}}}, "rl.eval.confidence must be between 0 and 1, got 1.5"),
        ({"clickhouse": {"max_rows_to_read": "many"}}, "clickhouse.max_rows_to_read must be an integer"),
        ({"clickhouse": {"url": 5}}, "clickhouse.url must be a string, got int 5"),
        ({"milvus": {"index_params": [1]}}, "milvus.index_params must be a mapping, got list [1]"),
        ({"clickhouse": {"databse": "x"}}, "unknown key clickhouse.databse; known keys: chdb_path, database"),
        (
            {"serving": {"planner": {"profile": "tiny"}}},
            "serving.planner.profile must be one of full, short, compact, request",
        ),
        (
            {"serving": {"planner": {"schema_limits": {"max_nodez": 1}}}},
            "unknown key serving.planner.schema_limits.max_nodez",
        ),
        ({"serving": {"api": {"max_k": "many"}}}, "serving.api.max_k must be an integer, got str 'many'"),
        (
            {"rl": {"reward_service": {"reward": {"accuracy": "top5"}}}},
            "rl.reward_service.reward.accuracy must be one of hit1, satisfy, mrr, got str 'top5'",
        ),
        (
            {"rl": {"reward_service": {"port": "8300"}}},
            "rl.reward_service.port must be an integer, got str '8300'",
        ),
    ],
)
def test_mistakes_are_one_typed_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in err.value.one_line()
    rc = main(["--config", str(path), "--workspace", str(tmp_path), "config"])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert out.err.startswith("error config: ") and message in out.err and out.err.count("\n") == 1


def test_a_number_where_a_float_is_expected_and_an_empty_section(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "clickhouse:\n  max_execution_time_s: 2\nmilvus:\n"))
    assert cfg.clickhouse.max_execution_time_s == 2.0 and isinstance(
        cfg.clickhouse.max_execution_time_s, float
    )
    assert cfg.milvus == Config().milvus


def test_prore_config_prints_a_file_that_loads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"serving": {"dsl": {"max_entries": 3}}, "rl": {"eval": {"seed": 9}}})
    assert main(["--config", str(path), "--workspace", str(tmp_path / "ws"), "config"]) == 0
    shown = capsys.readouterr().out
    (tmp_path / "again").mkdir()
    cfg = load_config(_write(tmp_path / "again", shown))
    assert cfg.section(ServingSettings).dsl.max_entries == 3 and cfg.section(RlSettings).eval.seed == 9
    assert cfg.workspace == tmp_path / "ws"
    assert main(["config", "--defaults"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == yaml.safe_load(EXAMPLE.read_text())


def test_section_registry_refuses_clashes() -> None:
    @dataclasses.dataclass(frozen=True)
    class Other:
        x: int = 1

    @dataclasses.dataclass
    class Loose:
        x: int = 1

    register_section("serving", ServingSettings)  # the same class again is harmless
    with pytest.raises(ConfigError, match="already registered"):
        register_section("serving", Other)
    with pytest.raises(ConfigError, match="indexing layer"):
        register_section("clickhouse", Other)
    with pytest.raises(TypeError, match="frozen"):
        register_section("loose", Loose)


def test_eval_flags_override_the_config(tmp_path: Path) -> None:
    from prore.cli import build_parser
    from rl.eval.commands import eval_settings

    cfg = load_config(_write(tmp_path, {"rl": {"eval": {"k": 10, "resamples": 50, "seed": 4}}}))
    args = build_parser().parse_args(["eval", "email", "--method", "bm25", "--k", "5"])
    assert eval_settings(args, cfg) == EvalSettings(k=5, resamples=50, seed=4)
    args = build_parser().parse_args(["eval", "email", "--method", "bm25", "--confidence", "0.9"])
    assert eval_settings(args, cfg) == EvalSettings(k=10, resamples=50, seed=4, confidence=0.9)
    args = build_parser().parse_args(["eval", "email", "--method", "bm25"])
    assert eval_settings(args, Config()) == EvalSettings()


def test_engines_opened_by_evaluation_use_the_configured_caches(
    workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    pytest.importorskip("chdb", reason="needs the clickhouse extra")
    from indexing.build import build_index
    from rl.eval.methods import MethodContext

    cfg = workspace_config("caches", text="hashing", image="hashing", hashing_dim=16)
    write_synthetic_corpus(cfg, "email", 20)
    build_index(cfg, "email", progress=False)
    cfg = cfg.with_section(ServingSettings(engine=CacheSizes(searches=7, requests=0, programs=3)))
    ctx = MethodContext(cfg, "email")
    try:
        engine = ctx.engine
        assert engine._prepared.maxsize == 3
        assert engine.retriever._searches.maxsize == 7 and engine.retriever._requests.maxsize == 0
    finally:
        ctx.close()
