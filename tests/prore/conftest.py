"""Fixtures of the ``prore`` entry-point tests: an indexed workspace and a config file pointing at it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from indexing.config import Config
from prore.cli import main


def config_file(cfg: Config, tmp_path: Path) -> str:
    """A YAML config that points at ``cfg``'s ClickHouse database and chDB path."""
    path = tmp_path / "prore.yaml"
    path.write_text(
        yaml.safe_dump(
            {"clickhouse": {"chdb_path": cfg.clickhouse.chdb_path, "database": cfg.clickhouse.database}}
        )
    )
    return str(path)


@pytest.fixture(scope="session")
def write_config() -> Callable[[Config, Path], str]:
    """``write_config(cfg, dir)``: a YAML config file pointing at ``cfg``'s ClickHouse database."""
    return config_file


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, workspace_config: Callable[..., Config],
            write_synthetic_corpus: Callable[..., Any]) -> tuple[Config, str]:  # fmt: skip
    """A workspace with a 40-document email index (hashing embedder) and a config file for it."""
    pytest.importorskip("chdb", reason="needs the clickhouse extra")
    cfg = workspace_config("cli")
    write_synthetic_corpus(cfg, "email", 40)
    config = config_file(cfg, tmp_path_factory.mktemp("cli-config"))
    rc = main(["--workspace", str(cfg.workspace), "--config", config, "--embedder", "hashing",
               "index", "build", "email", "--no-progress"])  # fmt: skip
    assert rc == 0
    return cfg, config
