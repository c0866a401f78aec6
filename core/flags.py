"""Command-line flags built from the fields of a frozen settings dataclass, laid over the configured values.

A command names the fields its command line may set (:class:`Flag`); everything else about a flag comes from
the field, so a setting is declared once:

- the option is ``--`` and the field's name with ``-`` for ``_`` (``window_ms``: ``--window-ms``), unless the
  :class:`Flag` names another (``--domain`` for ``domains``);
- its type is the annotation's: ``int``, ``float``, ``str`` and optional ones, read by
  :func:`core.settings.parse_text` (the rules the environment is read by); a ``Literal``'s values are the
  choices; ``bool`` is ``--x`` / ``--no-x``; ``tuple[X, ...]`` is a repeatable flag;
- its help is the field's docstring (the string under it, as the config file's keys are documented), then the
  default, the config key and the environment variable, if any;
- it has no default of its own: a flag left out leaves the configured value.

:meth:`Flags.over` lays the flags given over settings the config produced (defaults < file < environment,
:func:`indexing.config.load_config`), so every setting has one precedence: defaults < config file <
environment < flags.

Why a helper over argparse rather than a library. ``prore`` is one argparse tree whose layers each add their
sub-commands to a sub-parser (``sub.add_parser``), and it stays that tree. TRL's ``HfArgumentParser`` /
``TrlParser`` are parsers of their own (an ``ArgumentParser`` subclass built from whole dataclasses), give every
flag the dataclass's default, so a flag left out cannot be told from one given and the file's and the
environment's values would be reset, read help only from ``metadata={"help": ...}``, and import transformers
(``prore --help`` stays light); TrlParser's own ``--config`` would clash with prore's. pydantic-settings wants
``BaseSettings`` models in place of the frozen dataclasses every layer and test builds, nested flags spelt
``--reward.accuracy``, and its own parser or parse method. tyro builds its own parser and sub-commands from the
types and would need ``Annotated`` markers in the settings modules to keep today's flag names. What is left to
do is small: the fields' types and docstrings are already the source of truth, and pydantic already reads the
file; this module turns them into ``add_argument`` calls.

>>> import argparse
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Service:
...     port: int = 8300
...     '''TCP port.'''
...     mode: Literal["fast", "exact"] = "fast"
...     '''How it scores.'''
>>> flags = Flags(Service, "port", Flag("mode", "--scoring"))
>>> parser = argparse.ArgumentParser()
>>> flags.add_to(parser)
>>> flags.over(Service(port=9000), parser.parse_args(["--scoring", "exact"]))
Service(port=9000, mode='exact')
>>> flags.over(Service(port=9000), parser.parse_args([]))  # nothing given: the configured value stays
Service(port=9000, mode='fast')
>>> from core.openai_client import RetryPolicy  # a settings class whose fields have docstrings
>>> Flags(Section("retry", RetryPolicy), "max_attempts").help_of("max_attempts")
'Calls in all, the first included (1: no retry). (default 4; config retry.max_attempts)'
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from core.errors import ConfigError
from core.settings import Section, environment, field_type, parse_text

S = TypeVar("S")
C = TypeVar("C", bound="Sections")


class Sections(Protocol):
    """A config that holds settings sections by type (:class:`indexing.config.Config`)."""

    def section(self, cls: type[S]) -> S: ...

    def with_section(self, value: object) -> Sections: ...


@dataclass(frozen=True)
class Flag:
    """One field of a settings dataclass as a command-line option; what is not given here comes from the field."""

    field: str
    """Dotted path of the field in the settings (``reward.accuracy``)."""
    name: str | None = None
    """The option (``--domain``); default ``--`` and the field's name with ``-`` for ``_``."""
    metavar: str | None = None
    help: str | None = None
    """Help text in place of the field's docstring."""
    choices: tuple[Any, ...] | None = None
    """Allowed values where the annotation is no ``Literal``."""
    also: tuple[str, ...] = ()
    """More fields the flag sets to the same value (one deadline that two settings share)."""
    default: str | None = None
    """The default as the help gives it, where the command computes it (``<domain>-<algorithm>``)."""

    @property
    def option(self) -> str:
        return self.name or "--" + self.field.rsplit(".", 1)[-1].replace("_", "-")

    @property
    def dest(self) -> str:
        """The namespace attribute, argparse's own for the option (``--planner-url``: ``planner_url``)."""
        return self.option.lstrip("-").replace("-", "_")


_DOCS: dict[type[Any], dict[str, str]] = {}


def field_docs(cls: type[Any]) -> dict[str, str]:
    """The docstrings of ``cls``'s fields (the string literal under each, as ``indexing.config`` documents its
    keys), its bases' included; ``{}`` where the source cannot be read."""
    if cls not in _DOCS:
        _DOCS[cls] = _read_docs(cls)
    return _DOCS[cls]


def _read_docs(cls: type[Any]) -> dict[str, str]:
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, after in itertools.pairwise(body):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):  # fmt: skip
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?: <[^>]*>)?`")


def plain(doc: str) -> str:
    """A docstring as one line of help: reST roles and literals as their text, whitespace collapsed.

    >>> plain("See :class:`~serving.planner.PlannerSettings` and ``json``,\\n  the default.")
    'See PlannerSettings and json, the default.'
    """

    def role(match: re.Match[str]) -> str:
        text = match.group(1)
        return text.rsplit(".", 1)[-1] if "`~" in match.group(0) else text

    return " ".join(_ROLE.sub(role, doc).replace("``", "").split())


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if value == "":
        return '""'
    if value == ():
        return "none"
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return str(value)


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _replaced(value: S, changes: Mapping[str, Any]) -> S:
    """``value`` with each dotted key of ``changes`` replaced, nested dataclasses rebuilt (their checks run)."""
    direct = {k: v for k, v in changes.items() if "." not in k}
    nested: dict[str, dict[str, Any]] = {}
    for key, v in changes.items():
        if "." in key:
            head, rest = key.split(".", 1)
            nested.setdefault(head, {})[rest] = v
    for head, inner in nested.items():
        direct[head] = _replaced(getattr(value, head), inner)
    return dataclasses.replace(value, **direct) if direct else value  # type: ignore[type-var]


class Flags(Generic[S]):
    """The command-line flags of some fields of ``target``: a config :class:`~core.settings.Section` (its
    dataclass, whose config key and environment variables the help names) or a bare frozen dataclass.

    ``defaults`` is what the help shows as each default (``cls()`` unless given, for a class whose fields need
    values). ``exclusive`` names groups of fields at most one of which a command line may give.
    """

    def __init__(self, target: Section | type[S], *flags: Flag | str, defaults: S | None = None,
                 exclusive: Sequence[Sequence[str]] = ()) -> None:  # fmt: skip
        self.cls: type[S] = target.cls if isinstance(target, Section) else target
        self.key = target.name if isinstance(target, Section) else None
        self._env = {key: var for var, key in environment(self.cls).items()}
        self.defaults: S = defaults if defaults is not None else self.cls()
        self.flags = tuple(f if isinstance(f, Flag) else Flag(f) for f in flags)
        self.exclusive = tuple(tuple(group) for group in exclusive)
        for flag in self.flags:
            for key in (flag.field, *flag.also):
                field_type(self.cls, key)  # a path that is no field fails here, when the command registers
        named = {f.field for f in self.flags}
        if not all(key in named for group in self.exclusive for key in group):
            raise ConfigError(f"an exclusive group names a field with no flag: {self.exclusive}")

    def flag(self, key: str) -> Flag:
        return next(f for f in self.flags if f.field == key)

    def help_of(self, key: str) -> str:
        """The help of the flag of ``key``: its text, then its default, config key and environment variable."""
        flag = self.flag(key)
        keys = (flag.field, *flag.also)
        text = flag.help or plain(
            field_docs(_owner(self.cls, flag.field)).get(flag.field.rsplit(".", 1)[-1], "")
        )
        notes = [f"default {flag.default or _shown(_at(self.defaults, flag.field))}"]
        if typing.get_origin(field_type(self.cls, flag.field)) is tuple:
            notes.insert(0, "repeatable")
        if self.key:
            notes.append("config " + ", ".join(f"{self.key}.{k}" for k in keys))
        env = [self._env[k] for k in keys if k in self._env]
        if env:
            notes.append("env " + ", ".join(env))
        return f"{text} ({'; '.join(notes)})".strip()

    def add_to(self, parser: argparse.ArgumentParser | Any) -> None:
        """Add an option per flag to ``parser`` (a parser or an argument group)."""
        groups = {}
        for group in self.exclusive:
            exclusive = parser.add_mutually_exclusive_group()
            groups.update({key: exclusive for key in group})
        for flag in self.flags:
            where = groups.get(flag.field, parser)
            where.add_argument(flag.option, dest=flag.dest, default=argparse.SUPPRESS,
                               help=self.help_of(flag.field).replace("%", "%%"), **self._kind(flag))  # fmt: skip

    def _kind(self, flag: Flag) -> dict[str, Any]:
        tp = field_type(self.cls, flag.field)
        if tp is bool:
            return {"action": argparse.BooleanOptionalAction}
        kind: dict[str, Any] = {}
        if typing.get_origin(tp) is tuple:
            kind["action"] = "append"
            tp = typing.get_args(tp)[0]
        choices = flag.choices or (typing.get_args(tp) if typing.get_origin(tp) is Literal else None)
        if choices:
            kind["choices"] = choices
        elif flag.metavar is None:
            kind["metavar"] = flag.dest.upper()
        if flag.metavar is not None:
            kind["metavar"] = flag.metavar
        if not (choices and all(isinstance(c, str) for c in choices)):  # argparse says which choices it takes
            kind["type"] = _reader(tp)
        return kind

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        """The values of the flags ``args`` holds (those given on the command line), by dotted key."""
        out: dict[str, Any] = {}
        for flag in self.flags:
            if hasattr(args, flag.dest):
                value = getattr(args, flag.dest)
                if isinstance(value, list):  # a repeatable flag: each value once, in the order given
                    value = tuple(dict.fromkeys(value))
                out.update({key: value for key in (flag.field, *flag.also)})
        return out

    def over(self, value: S, args: argparse.Namespace) -> S:
        """``value`` with the flags given in ``args`` laid over it; a check of the settings that fails is its own
        typed error."""
        return _replaced(value, self.given(args))

    def apply(self, args: argparse.Namespace, cfg: C) -> C:
        """``cfg`` with the flags given in ``args`` laid over its section of this type."""
        out: C = cfg.with_section(self.over(cfg.section(self.cls), args))  # type: ignore[assignment]
        return out


def _owner(cls: type[Any], key: str) -> type[Any]:
    """The dataclass that declares the last part of the dotted ``key``."""
    owner: type[Any] = field_type(cls, key.rsplit(".", 1)[0]) if "." in key else cls
    return owner


def _reader(tp: Any) -> Any:
    """An argparse ``type`` reading a flag's text as ``tp`` (as the environment is read), its mistake a usage error."""

    def read(text: str) -> Any:
        try:
            return parse_text(tp, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    read.__name__ = getattr(tp, "__name__", "value")
    return read
