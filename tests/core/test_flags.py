"""Flags built from a settings dataclass's fields (core.flags): names, types, choices and help come from the
fields; a flag given replaces the configured value, one left out keeps it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from core.errors import ConfigError
from core.flags import Flag, Flags, field_docs
from core.settings import Section
from indexing.config import Config, load_config, register_sections


@dataclass(frozen=True)
class Scoring:
    """A nested section."""

    mode: Literal["fast", "exact"] = "fast"
    """How results are scored: fast or exact (100% recall)."""
    budget: int = 512
    """Tokens a completion may take."""


@dataclass(frozen=True)
class Toy:
    """A section of the config file, as a layer declares one."""

    ENVIRONMENT: ClassVar[dict[str, str]] = {"PRORE_TEST_TOY_PORT": "port"}

    host: str = "127.0.0.1"
    """Interface to listen on; ``0.0.0.0`` in a container."""
    port: int = 8300
    """TCP port."""
    domains: tuple[str, ...] = ("a", "b")
    """Domains served."""
    warmup: bool = True
    """Warm up before reporting ready."""
    window_ms: float | None = None
    """How long a batch waits; None: no wait."""
    deadline_s: float = 10.0
    """A deadline :class:`~indexing.config.Config` users share."""
    other_deadline_s: float = 10.0
    scoring: Scoring = field(default_factory=lambda: Scoring(budget=256))
    """The scoring, with a budget of its own."""

    def __post_init__(self) -> None:
        if self.port < 1:
            raise ConfigError(f"toy.port must be at least 1, got {self.port}", code="bad_port")


TOY = Section("toy_flags_test", Toy)
FLAGS: Flags[Toy] = Flags(
    TOY,
    "host",
    "port",
    Flag("domains", "--domain", choices=("a", "b", "c")),
    "warmup",
    "window_ms",
    Flag("deadline_s", "--timeout-s", also=("other_deadline_s",)),
    "scoring.mode",
    Flag("scoring.budget", metavar="N"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toy")
    FLAGS.add_to(parser)
    return parser


def _over(base: Toy, *argv: str) -> Toy:
    return FLAGS.over(base, _parser().parse_args(list(argv)))


def test_flags_are_named_typed_and_documented_by_their_fields() -> None:
    help_text = " ".join(_parser().format_help().split())
    for text in ("--host HOST", "--port PORT", "--domain {a,b,c}", "--warmup, --no-warmup", "--window-ms WINDOW_MS",
                 "--timeout-s TIMEOUT_S", "--mode {fast,exact}", "--budget N"):  # fmt: skip
        assert text in help_text, text
    assert (
        FLAGS.help_of("host")
        == "Interface to listen on; 0.0.0.0 in a container. (default 127.0.0.1; config toy_flags_test.host)"
    )
    assert FLAGS.help_of("port").endswith(
        "(default 8300; config toy_flags_test.port; env PRORE_TEST_TOY_PORT)"
    )
    assert FLAGS.help_of("domains").startswith("Domains served. (repeatable; default a, b;")
    assert FLAGS.help_of("window_ms").startswith("How long a batch waits; None: no wait. (default none;")
    assert (
        "(default 10.0; config toy_flags_test.deadline_s, toy_flags_test.other_deadline_s)"
        in FLAGS.help_of("deadline_s")
    )
    assert FLAGS.help_of("deadline_s").startswith("A deadline Config users share.")  # reST roles read as text
    assert "100% recall" in FLAGS.help_of("scoring.mode") and "100%% recall" not in FLAGS.help_of(
        "scoring.mode"
    )
    assert "100% recall" in _parser().format_help()  # escaped for argparse's %-formatting, shown once
    assert FLAGS.help_of("scoring.budget").endswith(
        "(default 256; config toy_flags_test.scoring.budget)"
    )  # the section's
    assert field_docs(Toy)["port"] == "TCP port." and "other_deadline_s" not in field_docs(
        Toy
    )  # no docstring


def test_given_flags_replace_the_configured_values_and_the_others_stay() -> None:
    configured = Toy(host="0.0.0.0", port=9000, scoring=Scoring(mode="exact", budget=100))
    assert _over(configured) == configured
    got = _over(configured, "--port", "9100", "--domain", "c", "--domain", "a", "--domain", "c", "--no-warmup",
                "--window-ms", "2.5", "--timeout-s", "3", "--budget", "64")  # fmt: skip
    assert got == Toy(host="0.0.0.0", port=9100, domains=("c", "a"), warmup=False, window_ms=2.5, deadline_s=3.0,
                      other_deadline_s=3.0, scoring=Scoring(mode="exact", budget=64))  # fmt: skip
    assert _over(configured, "--mode", "fast").scoring == Scoring(mode="fast", budget=100)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "many"], "argument --port: must be an integer, got str 'many'"),
        (["--mode", "slow"], "argument --mode: invalid choice: 'slow'"),
        (["--domain", "z"], "argument --domain: invalid choice: 'z'"),
        (["--window-ms", "soon"], "argument --window-ms: must be a number, got str 'soon'"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_flag_the_settings_refuse_is_their_typed_error() -> None:
    with pytest.raises(ConfigError) as err:
        _over(Toy(), "--port", "0")
    assert err.value.code == "bad_port"


def test_exclusive_flags_and_paths_that_are_no_field() -> None:
    flags: Flags[Toy] = Flags(Toy, "host", "port", exclusive=[("host", "port")])
    parser = argparse.ArgumentParser()
    flags.add_to(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--host", "h", "--port", "1"])
    with pytest.raises(ConfigError, match="no key prot in Toy"):
        Flags(Toy, "prot")
    with pytest.raises(ConfigError, match="no key mood in Scoring"):
        Flags(Toy, "scoring.mood")


def test_defaults_then_file_then_environment_then_flags(tmp_path: Path) -> None:
    register_sections(TOY)
    path = tmp_path / "c.yaml"
    path.write_text("toy_flags_test:\n  host: from-file\n  port: 8001\n  scoring:\n    mode: exact\n")
    cfg = load_config(path, environ={"PRORE_TEST_TOY_PORT": "8002"})
    toy = cfg.section(Toy)
    assert (toy.host, toy.port, toy.scoring) == ("from-file", 8002, Scoring(mode="exact", budget=256))
    args = _parser().parse_args(["--port", "8003"])
    assert FLAGS.apply(args, cfg).section(Toy) == Toy(
        host="from-file", port=8003, scoring=Scoring(mode="exact", budget=256)
    )
    assert load_config(path, environ={"PRORE_TEST_TOY_PORT": ""}).section(Toy).port == 8001  # empty: unset
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"PRORE_TEST_TOY_PORT": "eighty"})
    assert err.value.one_line() == (
        "error config: environment variable PRORE_TEST_TOY_PORT: toy_flags_test.port must be an integer, got str 'eighty'"
    )
    assert Config().with_section(toy).section(Toy) == toy
