"""The engine's settings: DSL limits and cache sizes from the config's ``serving`` section, or given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from indexing.config import Config
from serving.dsl import DslLimits, Program, Retrieval, ValidationError
from serving.engine import CacheSizes, Engine, ExecutionResult
from serving.settings import ServingSettings

TWO_ENTRIES = Program(
    "SELECT id FROM products WHERE id IN <text_1> AND id IN <text_2>",
    (Retrieval("text", "review", "sturdy"), Retrieval("text", "title", "jacket")),
)
SHORT_QUERY = Program(
    "SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", "sturdy build quality"),)
)


def test_open_reads_the_serving_section(small_index_cfg: Config) -> None:
    settings = ServingSettings(
        dsl=DslLimits(max_entries=1), engine=CacheSizes(searches=5, requests=6, programs=7)
    )
    with Engine.open(small_index_cfg.with_section(settings), "ecommerce") as engine:
        assert engine.dsl_limits.max_entries == 1
        assert engine.cache_stats()["programs"]["maxsize"] == 7
        assert (
            engine.cache_stats()["searches"]["maxsize"] == 5
            and engine.cache_stats()["requests"]["maxsize"] == 6
        )
        with pytest.raises(ValidationError) as info:
            engine.execute(TWO_ENTRIES)
        assert info.value.code == "too_many_entries"
    with Engine.open(small_index_cfg, "ecommerce") as default:
        assert isinstance(default.execute(TWO_ENTRIES), ExecutionResult)  # the language's default allows 8


def test_given_limits_win_over_the_config(small_index_cfg: Config) -> None:
    cfg = small_index_cfg.with_section(ServingSettings(dsl=DslLimits(max_entries=1)))
    with Engine.open(cfg, "ecommerce", dsl_limits=DslLimits(max_query_chars=10)) as engine:
        assert isinstance(engine.execute(TWO_ENTRIES), ExecutionResult)
        with pytest.raises(ValidationError) as info:
            engine.execute(SHORT_QUERY)
        assert info.value.code == "query_too_long"
        assert engine.prepare(TWO_ENTRIES).validated.tree is not None


def test_reading_the_settings_does_not_import_the_engine() -> None:
    code = "import sys, serving.settings; print(sorted(m for m in sys.modules if m.startswith('serving.engine')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
