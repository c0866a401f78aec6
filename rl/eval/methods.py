"""The registry of retrieval methods that can be evaluated, by name.

A method takes a :class:`MethodContext` (which opens the index and the engine on first use), a batch
of benchmark instances and the ranking depth ``k``, and returns one :class:`Outcome` per instance:
a ranked id list, or an error, which counts as an execution failure. The baselines register
themselves in the modules of :mod:`rl.baselines`; other methods (a trained planner) register with
:func:`register_method` from their own module, listed in :data:`PROVIDERS` or published under the
``proretrieval.methods`` entry-point group. Names live in the project's one registry type,
:class:`core.registry.Registry`: a provider that fails to import fails every lookup with its
cause (retried each time), never as an unknown method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from core.registry import Registry
from indexing.config import Config
from indexing.schema import CorpusSchema, schema_for
from rl.eval.errors import DuplicateMethod, EvalError, UnknownMethod
from rl.eval.outcome import Failure, Layer, Ran

PROVIDERS: tuple[str, ...] = ("rl.baselines.fusion", "rl.baselines.self_query", "rl.baselines.gold")
"""Modules imported before a lookup so that the methods they define are registered."""
FAMILY_PROVIDERS: tuple[str, ...] = (
    "rl.eval.planner_methods",
    "rl.eval.seq2seq_methods",
    "rl.eval.served_methods",
)
"""Modules registering method families: names with an argument, ``planner:PATH``, ``llm:URL``."""

ENTRY_POINT_GROUP = "proretrieval.methods"


class EvalInstance(Protocol):
    """What evaluation reads from a benchmark instance (``rl.datasets.Instance`` has all of it)."""

    @property
    def qid(self) -> str: ...
    @property
    def nl(self) -> str: ...
    @property
    def program(self) -> str: ...
    @property
    def gold_id(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def modalities(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Outcome:
    """What a method returned for one instance: ranked ids, or the reason it produced none and the layer
    (:data:`rl.eval.outcome.Layer`) where it stopped."""

    ids: tuple[str, ...] | None
    error: str | None = None
    layer: Layer | None = None

    @classmethod
    def ranked(cls, ids: Sequence[str]) -> Outcome:
        return cls(ids=tuple(ids))

    @classmethod
    def failed(cls, error: str, layer: Layer = "execution") -> Outcome:
        return cls(ids=None, error=" ".join(error.split()) or "failed", layer=layer)

    @classmethod
    def of(cls, ran: Ran) -> Outcome:
        """The outcome of one item of :func:`rl.eval.outcome.run_programs`."""
        if isinstance(ran, Failure):
            return cls.failed(ran.line(), ran.layer)
        return cls.ranked(ran.ids)

    @property
    def ok(self) -> bool:
        return self.ids is not None


class MethodContext:
    """What a method may use for one domain; the index and the engine are opened lazily, once.

    ``cache`` holds per-run state a method wants to keep across batches (a vocabulary, a model).
    """

    def __init__(self, cfg: Config, domain: str) -> None:
        self.cfg = cfg
        self.domain = domain
        self.schema: CorpusSchema = schema_for(domain)
        self.cache: dict[str, Any] = {}
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        """The program engine (``serving.engine.Engine``) on the published index of this domain."""
        if self._engine is None:
            from serving.engine.engine import Engine
            from serving.settings import ServingSettings

            caches = self.cfg.section(ServingSettings).engine
            self._engine = Engine.open(self.cfg, self.domain, caches=caches)
        return self._engine

    @property
    def index_version(self) -> str | None:
        """The index version the methods read: the open engine's, else the domain's published one."""
        if self._engine is not None:
            return str(self._engine.handle.version)
        from indexing.index import read_current
        from indexing.workspace import Workspace

        return read_current(Workspace(self.cfg.workspace), self.domain)

    @property
    def index(self) -> Any:
        """The engine's index handle (``indexing.index.IndexHandle``), so both share one connection."""
        return self.engine.handle

    def close(self) -> None:
        """Close the engine if one was opened, and every cached value that has a ``close`` (a model
        server's client, an inference engine); closing twice is harmless."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        cached, self.cache = list(self.cache.values()), {}
        for value in cached:
            close = getattr(value, "close", None)
            if callable(close):
                close()


Method = Callable[[MethodContext, Sequence[EvalInstance], int], list[Outcome]]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method. ``uses_gold`` marks reference methods that read the gold program."""

    name: str
    run: Method
    description: str
    uses_gold: bool = False


class MethodRegistry:
    """Method specs by name (a :class:`~core.registry.Registry`); a name registered twice is an error."""

    def __init__(self, providers: Sequence[str] = PROVIDERS, entry_point_group: str | None = None) -> None:
        self._specs: Registry[MethodSpec] = Registry(
            "method",
            providers=providers,
            entry_point_group=entry_point_group,
            unknown=UnknownMethod,
            duplicate=DuplicateMethod,
            duplicate_code=None,
        )

    def register(self, name: str, *, description: str, uses_gold: bool = False) -> Callable[[Method], Method]:
        """Decorator adding ``fn`` under ``name``; raises :class:`DuplicateMethod` if taken."""

        def add(fn: Method) -> Method:
            self._specs.add(name, MethodSpec(name, fn, description, uses_gold))
            return fn

        return add

    def _load(self) -> None:
        try:
            self._specs.load()
        except ImportError as exc:
            # The registry retries on the next lookup; meanwhile the user sees why, in one line.
            raise EvalError(
                f"a method provider failed to import ({type(exc).__name__}: {exc}); "
                f"providers: {', '.join(self._specs.providers) or 'none'}",
                code="method_provider",
            ) from exc

    def get(self, name: str) -> MethodSpec:
        """The method called ``name`` (``family:ARG`` builds one from a registered family), or
        :class:`UnknownMethod` listing the known names."""
        family, sep, arg = name.partition(":")
        if sep and arg and family in FAMILIES:
            return FAMILIES.get(family)(arg)
        self._load()
        return self._specs.get(name)

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        self._load()
        return self._specs.names()


METHODS = MethodRegistry(PROVIDERS, ENTRY_POINT_GROUP)
FAMILIES: Registry[Callable[[str], MethodSpec]] = Registry(
    "method family",
    providers=FAMILY_PROVIDERS,
    unknown=UnknownMethod,
    duplicate=DuplicateMethod,
    duplicate_code=None,
)
"""Factories of parametrized methods by family name: ``FAMILIES.get("planner")(path)`` is a spec."""


def register_family(family: str, factory: Callable[[str], MethodSpec]) -> None:
    """Register ``factory`` so that ``family:ARG`` names the method ``factory(ARG)``."""
    FAMILIES.add(family, factory)


def register_method(name: str, *, description: str, uses_gold: bool = False) -> Callable[[Method], Method]:
    """Register a method in the global registry (see :class:`MethodRegistry`)."""
    return METHODS.register(name, description=description, uses_gold=uses_gold)


def get_method(name: str) -> MethodSpec:
    """Look up a registered method by name."""
    return METHODS.get(name)


def available_methods() -> tuple[str, ...]:
    """Names of every registered method."""
    return METHODS.names()
