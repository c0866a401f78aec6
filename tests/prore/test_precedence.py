"""One precedence for every setting of ``prore serve`` and ``prore reward serve``: defaults < config file <
environment < flags, the flags built from the settings' fields (core.flags) and the environment read where
the file is (indexing.config.load_config)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from indexing.config import Config
from prore.cli import build_parser, main
from prore.config import load_config
from rl.reward.commands import CLICKHOUSE_FLAGS, service_settings
from rl.reward.config import RewardConfig
from rl.reward.settings import ServiceSettings
from serving.commands import api_settings, planner_from_args, serve_settings
from serving.dsl.structured import STRUCTURED_LIMITS
from serving.planner import PlannerSettings
from serving.settings import ApiSettings

ROOT = Path(__file__).resolve().parents[2]
PLANNER_ENV = tuple(PlannerSettings.ENVIRONMENT)


@pytest.fixture(autouse=True)
def _no_planner_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PLANNER_ENV:
        monkeypatch.delenv(name, raising=False)


def _config(tmp_path: Path, data: dict[str, Any] | None = None) -> Config:
    if data is None:
        return load_config(workspace=tmp_path)
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path, workspace=tmp_path)


def _serve(*argv: str) -> Any:
    return build_parser().parse_args(["serve", *argv])


def test_prore_serve_defaults() -> None:
    args, cfg = _serve(), Config()
    assert planner_from_args(args, cfg) is None  # no planner URL: the fallback answers
    assert api_settings(args, cfg) == ApiSettings()
    planner = serve_settings(args, cfg).planner
    assert (planner.output, planner.schema_limits, planner.model) == ("grounded", STRUCTURED_LIMITS, None)


def test_prore_serve_file_then_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tmp_path, {"serving": {
        "planner": {"url": "http://file:8000/v1", "model": "from-file", "guided_samples": 2, "timeout_s": 20.0,
                    "schema_limits": {"max_sql_chars": 500}},
        "api": {"max_concurrent": 4, "plan_deadline_s": 7.0, "fallback_on_empty": False},
    }})  # fmt: skip
    planner = planner_from_args(_serve(), cfg)
    assert planner is not None
    assert (planner.url, planner.model, planner.guided_samples, planner.timeout_s, planner.output) == (
        "http://file:8000/v1", "from-file", 2, 20.0, "grounded")  # fmt: skip
    assert (
        planner.schema_limits.max_sql_chars == 500 and planner.schema_limits.max_query_chars == 200
    )  # evaluation's
    assert planner.embedder == cfg.embedder
    assert api_settings(_serve(), cfg) == ApiSettings(
        max_concurrent=4, plan_deadline_s=7.0, fallback_on_empty=False
    )

    monkeypatch.setenv("PRORE_PLANNER_MODEL", "from-env")
    monkeypatch.setenv("PRORE_PLANNER_OUTPUT", "json")
    monkeypatch.setenv("PRORE_PLANNER_GUIDED_SAMPLES", "3")
    cfg = _config(tmp_path, yaml.safe_load((tmp_path / "prore.yaml").read_text()))
    planner = planner_from_args(_serve(), cfg)
    assert planner is not None
    assert (planner.url, planner.model, planner.output, planner.guided_samples) == (
        "http://file:8000/v1", "from-env", "json", 3)  # fmt: skip

    args = _serve("--planner-model", "from-flag", "--planner-output", "grammar", "--planner-timeout-s", "30",
                  "--max-concurrent", "8", "--fallback-on-empty", "--guided-samples", "0")  # fmt: skip
    planner = planner_from_args(args, cfg)
    assert planner is not None
    assert (planner.url, planner.model, planner.output, planner.guided_samples, planner.timeout_s) == (
        "http://file:8000/v1", "from-flag", "grammar", 0, 30.0)  # fmt: skip
    api = api_settings(args, cfg)
    assert (api.max_concurrent, api.plan_deadline_s, api.fallback_on_empty) == (
        8,
        30.0,
        True,
    )  # one deadline, two keys


def test_a_planner_card_gives_the_profile_unless_a_flag_names_one_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    card = tmp_path / "final"
    card.mkdir()
    (card / "planner.json").write_text('{"profile": "compact", "domains": ["ecommerce"], "algorithm": "sft"}')
    monkeypatch.setenv("PRORE_PLANNER_PROFILE", "short")
    cfg = _config(tmp_path, {"serving": {"planner": {"url": "http://p/v1", "card": str(card)}}})
    planner = planner_from_args(_serve(), cfg)
    assert (
        planner is not None and planner.profile == "compact"
    )  # the card wins over the environment's profile
    assert (
        planner_from_args(_serve("--planner-card", str(card)), _config(tmp_path)) is None
    )  # no URL, no planner
    rc = main(
        [
            "--workspace",
            str(tmp_path),
            "--config",
            str(tmp_path / "prore.yaml"),
            "serve",
            "--planner-profile",
            "full",
        ]
    )
    assert rc == 2 and capsys.readouterr().err.startswith(
        "error planner_card: give the planner's prompt profile or its card"
    )


@pytest.mark.parametrize(
    ("env", "argv", "line"),
    [
        (
            {"PRORE_PLANNER_GUIDED_SAMPLES": "x"},
            ["config"],
            "error config: environment variable PRORE_PLANNER_GUIDED_SAMPLES: serving.planner.guided_samples must be an "
            "integer, got str 'x'",
        ),
        (
            {"PRORE_PLANNER_PROFILE": "tiny"},
            ["config"],
            "error config: environment variable PRORE_PLANNER_PROFILE: serving.planner.profile must be one of full, short, "
            "compact, request, got str 'tiny'",
        ),
        (
            {"PRORE_PLANNER_GUIDED_SAMPLES": "17"},
            ["config"],
            "error planner_guided_samples: guided samples must be an integer from 0 to 16, got 17",
        ),
        (
            {},
            ["serve", "--guided-samples", "17"],
            "error planner_guided_samples: guided samples must be an integer from 0 to 16, got 17",
        ),
        (
            {},
            ["serve", "--max-nl-chars", "0"],
            "error bad_limit: serving.api.max_nl_chars must be at least 1, got 0",
        ),
    ],
)
def test_a_bad_environment_variable_or_flag_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    env: dict[str, str], argv: list[str], line: str,
) -> None:  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["--workspace", str(tmp_path), *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_prore_config_shows_the_environment_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump({"serving": {"planner": {"url": "http://file/v1", "model": "m"}}}))
    monkeypatch.setenv("PRORE_PLANNER_URL", "http://env/v1")
    assert main(["--workspace", str(tmp_path), "--config", str(path), "config"]) == 0
    planner = yaml.safe_load(capsys.readouterr().out)["serving"]["planner"]
    assert (planner["url"], planner["model"], planner["output"]) == ("http://env/v1", "m", "grounded")


def test_prore_reward_serve_file_then_flags(tmp_path: Path) -> None:
    cfg = _config(tmp_path, {
        "clickhouse": {"max_execution_time_s": 3.0},
        "rl": {"reward_service": {"port": 9001, "window_ms": 1.0, "reward": {"accuracy": "mrr", "budget_chars": 100}}},
    })  # fmt: skip

    def reward(*argv: str) -> Any:
        return build_parser().parse_args(["reward", "serve", *argv])

    assert service_settings(reward(), Config()) == ServiceSettings()
    assert service_settings(reward(), cfg) == ServiceSettings(
        port=9001, window_ms=1.0, reward=RewardConfig(accuracy="mrr", budget_chars=100))  # fmt: skip
    args = reward("--port", "9002", "--domain", "email", "--no-warmup", "--budget-tokens", "64", "--execution-credit",
                  "0.5", "--max-execution-time-s", "2")  # fmt: skip
    assert service_settings(args, cfg) == ServiceSettings(
        port=9002, window_ms=1.0, domains=("email",), warmup=False,
        reward=RewardConfig(accuracy="mrr", budget_chars=100, budget_tokens=64, execution_credit=0.5))  # fmt: skip
    assert CLICKHOUSE_FLAGS.apply(args, cfg).clickhouse.max_execution_time_s == 2.0
    assert CLICKHOUSE_FLAGS.apply(reward(), cfg).clickhouse.max_execution_time_s == 3.0


def test_the_flags_keep_their_names_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """The options README, the scripts and the chart pass (names, and the defaults their help shows)."""
    for argv, wanted in (
        (["serve"], ["--planner-url URL", "--planner-model", "--planner-card PATH", "--planner-profile {full,short,compact,request}",
                     "--planner-output {json,grammar,grounded,free}", "--planner-timeout-s", "--guided-samples N",
                     "--max-concurrent", "--max-nl-chars", "--execute-timeout-s", "--fallback-on-empty",
                     "--no-fallback-on-empty", "--planner-key-env VAR", "--token-env VAR", "(default grounded;",
                     "env PRORE_PLANNER_URL", "config serving.api.max_concurrent"]),
        (["reward", "serve"], ["--domain {ecommerce,email}", "--host", "--port", "--accuracy {hit1,satisfy,mrr}",
                               "--budget-tokens", "--budget-chars", "--execution-credit C", "--window-ms",
                               "--max-batch-items", "--max-queue-items", "--max-concurrent-requests",
                               "--batch-timeout-s", "--engine-workers", "--no-warmup", "--max-execution-time-s",
                               "--tokenizer DIR", "--log-level", "(default 8300;",
                               "config rl.reward_service.reward.accuracy", "config clickhouse.max_execution_time_s"]),
    ):  # fmt: skip
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        for text in wanted:
            assert text in out, (argv, text)


def test_no_section_is_registered_by_an_import() -> None:
    """Importing every layer (the whole CLI) registers nothing; :func:`prore.config.load_config` registers."""
    code = ("import prore.cli, serving.settings, rl.settings; from indexing.config import SECTIONS; "
            "print(SECTIONS.names()); from prore.config import load_config; load_config(); print(SECTIONS.names())")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.splitlines() == ["()", "('rl', 'serving')"]


def test_the_vector_cache_is_off_by_default_set_by_the_file_and_over_it_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRORE_VECTOR_CACHE", raising=False)
    assert _config(tmp_path).embedder.vector_cache is None
    data = {"embedder": {"vector_cache": str(tmp_path / "from-file")}}
    assert _config(tmp_path, data).embedder.vector_cache == str(tmp_path / "from-file")
    monkeypatch.setenv("PRORE_VECTOR_CACHE", str(tmp_path / "from-env"))
    assert _config(tmp_path, data).embedder.vector_cache == str(tmp_path / "from-env")
