"""``python -m serving.kserve --config FILE`` reads the project's one config file: the ``serving`` section it runs
with, the ``rl`` section of the layer above it left unread (``prore`` reads the same file whole).

The transformer's argument parsing and config loading run in a process of their own, as the container runs them:
this pytest process has every layer's sections registered, the transformer only indexing's and serving's. No
engine, model server or vLLM is started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip(
    "kserve", reason="pip install '.[kserve]' (serving.kserve's parser is KServe's ModelServer's)"
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "config.example.yaml"

LOAD = """
import json, sys
from serving.kserve import api_settings, config, parse_args, planner_settings
args = parse_args(sys.argv[1:])
cfg = config(args)
planner = planner_settings(args, cfg)
api = api_settings(args, cfg)
from serving.settings import ServingSettings
print(json.dumps({"layers": sorted(m for m in ("rl", "prore") if m in sys.modules), "sections": sorted(cfg.sections),
                  "max_entries": cfg.section(ServingSettings).dsl.max_entries, "database": cfg.clickhouse.database,
                  "planner": [planner.url, planner.model, planner.output, planner.max_tokens, planner.timeout_s,
                              planner.guided_samples],
                  "api": [api.fuse, api.fuse_gate, api.max_k, api.warmup]}))
"""


def _load(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", LOAD, "--workspace", "w", "--predictor_host", "p.ns", *argv]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PRORE_PLANNER_")}
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**environ, **(env or {})}
    )


def _planner(*argv: str, env: dict[str, str] | None = None) -> list[object]:
    done = _load(*argv, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got: list[object] = json.loads(done.stdout)["planner"]
    return got


def test_the_transformers_planner_settings_have_the_one_precedence(tmp_path: Path) -> None:
    """Its planner client is the config's ``serving.planner``, as ``prore serve``'s: the transformer's defaults
    (JSON-constrained decoding, for KServe's runtime) < the file < ``PRORE_PLANNER_*`` < its ``--planner_*``
    flags; the URL and the timeout are KServe's ``--predictor_*`` arguments."""
    assert _planner() == ["http://p.ns/openai/v1", None, "json", 512, 10.0, 0]
    path = tmp_path / "prore.yaml"
    path.write_text(
        yaml.safe_dump({"serving": {"planner": {"output": "grammar", "model": "m-file", "max_tokens": 300}}})
    )
    assert _planner(f"--config={path}") == ["http://p.ns/openai/v1", "m-file", "grammar", 300, 10.0, 0]
    env = {"PRORE_PLANNER_OUTPUT": "free", "PRORE_PLANNER_MODEL": "m-env"}
    assert _planner(f"--config={path}", env=env)[1:3] == ["m-env", "free"]
    flags = ("--planner_output=grounded", "--planner_model=m-flag", "--predictor_path=/v1",
             "--predictor_request_timeout_seconds=3", "--predictor_use_ssl=true")  # fmt: skip
    assert _planner(f"--config={path}", *flags, env=env) == [
        "https://p.ns/v1",
        "m-flag",
        "grounded",
        300,
        3.0,
        0,
    ]
    bad = _load("--planner_output=xml")
    assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr


def test_the_transformer_reads_the_documented_example_whole(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["serving"]["dsl"]["max_entries"] = 3
    data["clickhouse"]["database"] = "from_file"
    data["rl"]["eval"]["k"] = 7  # read by prore only
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump(data))
    for config in (EXAMPLE, path):
        done = _load("--config", str(config))
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout)
        assert got["layers"] == [] and got["sections"] == ["serving"]  # rl is neither imported nor read
    assert (got["max_entries"], got["database"]) == (3, "from_file")
    assert got["api"] == ["none", "none", 100, False]


def test_the_transformer_fuses_as_its_config_says(tmp_path: Path) -> None:
    """``serving.api`` reaches the transformer's search service: fusion with the self-querying retriever (and the
    rest of the section) as ``prore serve`` reads it; the warm-up stays off (the model loads its engines)."""
    path = tmp_path / "prore.yaml"
    path.write_text(
        yaml.safe_dump({"serving": {"api": {"fuse": "self-query", "fuse_gate": "unanimous", "max_k": 50}}})
    )
    done = _load(f"--config={path}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["api"] == ["self-query", "unanimous", 50, False]
    # its flags over the file, as prore serve's --guided-samples, --fuse and --fuse-gate (what the operator passes)
    done = _load(f"--config={path}", "--guided_samples=8", "--fuse_gate=none")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert (got["api"], got["planner"][-1]) == (["self-query", "none", 50, False], 8)
    bad = _load("--fuse_gate=majority")
    assert bad.returncode == 2 and "invalid choice: 'majority'" in bad.stderr


def test_the_transformer_still_refuses_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump({"servng": {}}))
    done = _load(f"--config={path}")
    assert done.returncode != 0
    assert "unknown top-level key 'servng' in config" in done.stderr
    path.write_text(yaml.safe_dump({"serving": {"dls": {}}}))
    assert "unknown key serving.dls" in _load(f"--config={path}").stderr
