"""What the engine keeps per program text and reports per engine: a validated program's derived plan
(:class:`Prepared`), a rejected one's error (:class:`Rejection`), the cache key of both (:func:`program_key`),
and the engine's counters (:class:`EngineStats`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.cache import CacheStats
from core.errors import ProReError
from serving.dsl import Code, DslError, Program, ValidatedProgram
from serving.engine.plan import is_plain_filter
from serving.engine.results import ExecutionResult, candidate_name
from serving.engine.retrieval import RetrievalRequest

BatchOutcome = ExecutionResult | ProReError
"""What :meth:`Engine.execute_many` returns per program: a result, or the typed error it raised."""


@dataclass(frozen=True)
class Prepared:
    """A validated program and what the engine derives from it once (cached by program text)."""

    validated: ValidatedProgram
    plan: ValidatedProgram
    """What gets substituted and run: ``validated`` after the planning passes of :mod:`serving.engine.plan`."""
    requests: tuple[RetrievalRequest, ...]
    """One request per entry of ``retrieval_list``, in order (with its pushed filter, when pushdown is on)."""
    chain: tuple[int, ...] = ()
    """Entries searched within each other's candidates, in order (:mod:`serving.engine.conditional`):
    each after the first is searched among the ids of the one before. Empty unless the conditional pass
    is on and at least two entries qualify (one, with a tail)."""
    tail: tuple[int, ...] = ()
    """Entries searched among the ids of the chain's last list, after it: positive uses under ``OR``
    (:func:`serving.engine.conditional.conditional_plan`)."""
    branches: tuple[tuple[int, ...], ...] = ()
    """Chains within disjuncts, for a program without ``chain`` (:func:`serving.engine.conditional.branch_chains`):
    each searched as a chain, apart from the others."""

    @property
    def names(self) -> tuple[str, ...]:
        """Placeholder name per entry: ``text_1``, ``image_2``, ..."""
        return tuple(candidate_name(i, e) for i, e in enumerate(self.validated.retrieval_list))

    @property
    def positive(self) -> tuple[int, ...]:
        """0-based indexes of the entries that appear under ``id IN`` (they score in the ranking)."""
        return self.validated.positive_entries

    @property
    def ordered(self) -> bool:
        """The SQL has ``ORDER BY``: its row order wins."""
        return self.validated.has_order_by

    @property
    def plain(self) -> bool:
        """The plan is ``SELECT [DISTINCT] id FROM <table> WHERE <cond>`` and nothing else (scan-batchable)."""
        return is_plain_filter(self.plan.tree)


@dataclass(frozen=True)
class Rejection:
    """What the program cache keeps of a rejected program: the data of its error, not the exception.

    A cached exception raised again would carry every earlier raise's frames in its traceback (and keep
    them alive), and one object would sit in several batch slots; :meth:`error` builds a fresh one.
    """

    kind: type[DslError]
    message: str
    code: str
    path: str | None
    position: int | None

    @classmethod
    def of(cls, exc: DslError) -> Rejection:
        return cls(type(exc), exc.message, exc.code, exc.path, exc.position)

    def error(self) -> DslError:
        """A new exception of the original kind, with the original code, message and place."""
        return self.kind(self.message, code=Code(self.code), path=self.path, position=self.position)


def program_key(program: Program) -> str:
    """The cache key of a program: its canonical JSON (every RPL field written out)."""
    if not isinstance(program, Program):
        # Text is parsed at the edge (parse_program / extract_program), where its FormatError belongs.
        raise TypeError(
            f"the engine runs typed Programs, not {type(program).__name__}; "
            "read text with serving.dsl.parse_program or extract_program first"
        )
    return program.to_json(explicit=True)


@dataclass(frozen=True)
class EngineStats:
    """Counters of one engine since it opened, for a metrics exporter (all monotonic but ``caches``' sizes).

    ``programs`` counts programs received by :meth:`Engine.execute` and :meth:`Engine.execute_many`
    in calls that returned; ``results`` those that returned a result and ``errors`` those that yielded
    a typed error, by code (``deadline_exceeded``, ``exec_failed``, the DSL's codes, ...). ``batches``
    counts calls, ``failed_batches`` the calls that raised (a store failure). ``sql_calls`` and
    ``store_calls`` (``embed``, ``ann``, ``sparse``, ``fetch_vectors``) count store requests.
    ``caches`` has each cache's hits, misses, size and bound. ``stage_ms`` is the wall time of each
    stage (:data:`~serving.engine.results.STAGES`) summed over calls; overlapping calls both count.
    """

    programs: int
    results: int
    errors: Mapping[str, int]
    batches: int
    failed_batches: int
    sql_calls: int
    store_calls: Mapping[str, int]
    caches: Mapping[str, CacheStats]
    stage_ms: Mapping[str, float]
