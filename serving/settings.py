"""Settings of the serving layer: the ``serving:`` section of the config file.

:data:`SECTIONS` declares it; whoever loads the file registers it (``prore``, ``python -m serving.kserve``,
see :func:`indexing.config.load_config`)::

    serving:
      dsl:              # what programs are checked against (serving.dsl.limits.DslLimits)
        max_entries: 8
      engine:           # entries kept by the engine's caches (serving.settings.CacheSizes)
        programs: 50000
      planning:         # what a placeholder means (serving.settings.PlanningOptions)
        mode: default   # or fixed-k, the paper's
        adaptive_k: false
      sql:              # how id sets reach ClickHouse (serving.settings.SqlSettings)
        ids: bound
      api:              # prore serve's limits and deadlines (serving.settings.ApiSettings)
        max_concurrent: 16
      planner:          # the planner prore serve asks (serving.planner.PlannerSettings; env PRORE_PLANNER_*)
        url: http://127.0.0.1:8000/v1

>>> from indexing.config import Config
>>> Config().section(ServingSettings).dsl.default_k
20
>>> ServingSettings(dsl=DslLimits(default_k=7))
Traceback (most recent call last):
...
core.errors.ConfigError: serving.dsl.default_k 7 must be one of serving.dsl.k_ladder (3, 5, 10, 20, 50)
>>> ApiSettings(max_concurrent=0)
Traceback (most recent call last):
...
core.errors.ConfigError: serving.api.max_concurrent must be at least 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal, get_args

from core.errors import ConfigError
from core.settings import Section
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.planner import PlannerSettings

SECTION = "serving"


@dataclass(frozen=True)
class CacheSizes:
    """Entries kept by each of the engine's caches (:class:`serving.engine.Engine`); 0 turns a cache off. And
    how many store searches the engine runs at once (``search_threads``).

    Defined here, not in the engine package, so that reading the config file does not import the engine.
    """

    searches: int = 100_000
    """Raw search results, keyed by (field, dense|sparse, query, width)."""
    requests: int = 100_000
    """Final candidate lists, keyed by the whole retrieval request."""
    programs: int = 50_000
    """Validated programs, their rendered SQL and their SQL results, keyed by the program."""
    vectors: int = 50_000
    """Stored document vectors, keyed by (field, id): the candidates that conditioned searches and the
    reranker score in process (about 1.5 KB each at 384 dimensions)."""
    search_threads: int = 4
    """Vector store searches of one batch in flight at once (at least 1). A batch makes one store search per
    field, width, pushed filter and candidate set; they are independent, and each mostly waits on the store,
    so several at once overlap that wait. The results and every score are the same at any number. Measured with
    ``bench/reward.py --quick --milvus server --client-batch-ms 2 --search-threads 1,2,4,8 --repeat 3`` (one
    DAPO-scale step of 8,192 synthetic rollouts, 2 cores): the service 0.83x / 0.79x / 0.75x the time of one at
    a time with 2 / 4 / 8, the engine's in-process step 0.83x with 4. Default 4."""

    @classmethod
    def disabled(cls) -> CacheSizes:
        """No engine caching: every call searches and runs SQL again (embeddings stay with the embedders)."""
        return cls(searches=0, requests=0, programs=0, vectors=0)


PlanningMode = Literal["default", "fixed-k"]
"""What ``serving.planning.mode`` names: the engine's passes as their switches say, or the paper's fixed K."""
PLANNING_MODES: tuple[str, ...] = get_args(PlanningMode)
"""The names of :data:`PlanningMode`, for choices and messages."""

MAX_HEAD_WIDTH = 16_000
"""The widest a chain's head may be searched (``chain_head_max``): under the stores' ceiling
(:data:`indexing.stores.base.MAX_HITS`, 16,384) with room for the engine's margin past ``k``."""


def head_widens(chain_head_docs: int, chain_head_max: int, rows: int) -> bool:
    """Whether a chain's head is searched wider than its ``k`` on a corpus of ``rows`` documents: only past
    ``chain_head_docs`` documents, and neither setting 0 (:meth:`PlanningOptions.head_width`). Benchmarks compare
    planning by it (:func:`rl.datasets.store.planning_mismatch`).

    >>> head_widens(5000, 400, 5000), head_widens(5000, 400, 5001), head_widens(0, 400, 10**6), head_widens(5000, 0, 10**6)
    (False, True, False, False)
    """
    return bool(chain_head_docs and chain_head_max) and rows > chain_head_docs


@dataclass(frozen=True)
class PlanningOptions:
    """The engine's planning passes (:mod:`serving.engine.pushdown`, :mod:`serving.engine.adaptive`,
    :mod:`serving.engine.conditional`, :mod:`serving.engine.ties`): each changes which candidates a
    program's searches return, and so what a placeholder means.

    **The default engine** is conditional evaluation with filter pushdown: a placeholder that guards the
    rows (a positive conjunct of the ``WHERE``) is its entry's top-K *among the documents the program can
    still return* (its structured guards pushed into the search, then among the previous entry's list), not
    among the whole corpus; on a corpus larger than ``chain_head_docs`` the chain's first list is its entry's
    top ``k × rows / chain_head_docs`` (at most ``chain_head_max``), the same share of the corpus at every size.
    That meaning does not depend on the corpus size, so a program keeps its answer from 5k to 1M documents.
    ``bench/scale.py`` (Milvus server, a benchmark kept under this engine) measured 0.0-0.7% of programs
    returning nothing from 5k to 1M products with the hashing embedder and 0.0-1.0% to 200k with MiniLM, against
    25-31% with fixed K from 50k on; P@1 0.747 against 0.500 at 1M (hashing) and 0.917 against 0.663 at 200k
    (MiniLM); p50 / p95 at 1M of 7.2 / 11.9, 22.8 / 34.7 and 37.3 / 65.4 ms for L1 / L2 /
    L3 (README, "What a placeholder means"). Benchmarks are synthesized by the engine they are kept under
    (:func:`rl.datasets.synth.synthesize` records it in the manifest), so the oracle keeps Hit@1 = P@1 = 1.0
    under the default.

    ``mode: fixed-k`` is the paper's semantics, kept for reproducing it: every placeholder is its entry's
    own top-K over the whole corpus, and the pass switches (``pushdown``, ``adaptive_k``, ``conditional``)
    are all off whatever they say. Ties are cut by the ranking contract in either mode (``exact_ties``).

    >>> PlanningOptions().pushdown, PlanningOptions().conditional
    (True, True)
    >>> PlanningOptions(mode="fixed-k").pushdown, PlanningOptions(mode="fixed-k", conditional=True).conditional
    (False, False)
    """

    mode: PlanningMode = "default"
    """``default``: the passes as their switches below say; ``fixed-k``: the paper's fixed top-K
    membership, every pass off (README, "What a placeholder means")."""
    pushdown: bool = True
    """Push the structured conditions that guard a positive placeholder (its AND siblings on the way
    up to the WHERE) into that entry's dense search as a Milvus ``filter``, so its top-K is drawn from
    documents that can be results. Exact once K covers the guarded documents; at a fixed K a program's
    WHERE keeps the same rows or more. On; measured alone on the demo benchmarks kept under fixed K:
    oracle Hit@1 0.950-1.000, P@5 up 0.03-0.07, R@10 up 0.08-0.11, 1.0-2.1x the time per program on
    Milvus Lite."""
    adaptive_k: bool = False
    """Widen the positive, unreranked entries of a program whose SQL returns fewer rows than the call's
    ``k`` (or the program's LIMIT), one rung of ``serving.dsl.k_ladder`` per round (past the top rung,
    doubling), up to ``adaptive_k_max``. Off: beside the default passes it moved P@1 by at most 0.007 at any
    size (``bench/scale.py``) and costs rounds (L3 p50 38 against 35 ms at 1M)."""
    adaptive_k_max: int = 50
    """Widest ``k`` adaptive K may give an entry; at least the ladder's smallest rung. Values past the
    ladder's top rung are reached by doubling it (50, 100, 200, ...)."""
    conditional: bool = True
    """Search the positive placeholders that are conjuncts of the outer WHERE (``... AND id IN <a> AND
    id IN <b>``: only AND on the way up, each entry used once, unreranked) within each other's
    candidates, in ``retrieval_list`` order: the first as usual, each next one only among the ids of the
    list before it (dense: ``id in [...]`` in its Milvus filter, or scored in process under
    ``candidates_in_process``; BM25 scores only those ids), so
    its top-K is drawn from documents the earlier entries kept. The conjunction is then the last list,
    non-empty whenever the first list is, at any corpus size. On."""
    conditional_disjuncts: bool = True
    """Under ``conditional``, also search the positive placeholders under ``OR`` (``id IN <a> AND (id IN <b> OR
    id IN <c>)``: each used once, unreranked, under no ``NOT``) among the ids of the chain's last list, the
    chain's *tail* (:mod:`serving.engine.conditional`): every row is in that list, so only documents that
    cannot be rows are dropped. Measured with pushdown (``bench/scale.py``, hashing embedder): programs returning
    nothing 0.3% against 7.7% at 1M products, P@1 0.630 against 0.600 (0.913 against 0.933 at 5k, where the
    benchmark was kept under fixed K). On; off is the conjuncts-only chain, for comparison."""
    conditional_branches: bool = True
    """Under ``conditional``, in a program without a chain of its outer ``WHERE``, search the positive placeholders
    that are conjuncts of one disjunct (``(id IN <a> AND id IN <b>) OR (id IN <c> AND id IN <d>)``: each used once,
    unreranked, under no ``NOT``) as a chain of their own, head widened like the outer chain's
    (:mod:`serving.engine.conditional`, "Chains within disjuncts"), on a corpus larger than ``chain_head_docs``
    (:meth:`branches_at`): at or below it nothing changes. Measured with ``bench/scale.py`` (README, "Chains
    within disjuncts and a tapered chain, measured"): programs returning nothing 0.7% to 0.0% at 200k products
    (hashing) and 1.3% to 0.3% at 50k (MiniLM). On; off, each disjunct intersects independent top-K lists."""
    chain_head_docs: int = 5000
    """Under ``conditional``, read a chain's first entry's (its *head*'s) ``k`` as written for a corpus of this many
    documents: on a larger corpus of ``rows`` the head is searched at ``k × rows / chain_head_docs`` (rounded up),
    at most ``chain_head_max``, and the chain's next entries and its tail take their top-K among that wider first
    list (:mod:`serving.engine.conditional`, "A wider head"). A fixed top-K is an ever smaller share of a growing
    corpus, and at 1M products the head's 20 seldom hold a document that also satisfies the next entries. The
    head's placeholder then means its entry's top ``head_width``; the other entries keep their ``k``, so the rows
    are still at most the last list's. At or below this size nothing changes. Default 5,000, the size the paper's
    corpora (3,000 products, 5,000 emails) and the scale benchmark's programs were written at: measured with
    ``bench/scale.py``, P@1 at 1M 0.747 against 0.653 with the head's own K (hashing embedder), 0.917 against 0.867
    at 200k with MiniLM, and unchanged at 5k. 0: off, the head is its entry's top-K like every other placeholder."""
    chain_head_max: int = 400
    """The widest a chain's head is searched (``chain_head_docs``); at most 16,000. Measured at 1M products: a
    head of 1,000 or 4,000 gave P@1 0.753 against 0.747 at 400, with p95 latency of 109-173 ms against 70 ms
    (L3), past the 100 ms goal."""
    chain_taper: bool = True
    """Under ``conditional``, search the links of a chain of three or more entries between its widened head and
    its last entry at widths falling geometrically from the head's width to the last entry's ``k`` (a head of 400
    and K = 20: 400, 89, 20), so that every entry's facet selects documents (:mod:`serving.engine.conditional`,
    "A tapered chain"); off, the second entry narrows to its ``k`` and a third keeps all of them. Where the head
    is not widened (``chain_head_docs``) nothing changes. Measured with ``bench/scale.py``: programs of three or
    more searches P@1 0.73 to 0.76 at 200k products (hashing) and at 50k (MiniLM). On."""
    candidates_in_process: bool = False
    """Score a dense search among candidates (a chained entry's, under ``conditional``) in process: the
    candidates' stored vectors fetched once per field for the whole batch (cached, ``serving.engine.vectors``)
    and every candidate scored by the store's metric, as the store's own search among them ranks them
    (:mod:`serving.engine.retrieval`, "Candidates"); off, each such search is a store search of its own with
    ``id in [...]`` in its filter. The results are the same (tested); only the calls and the time differ.
    Measured side by side: a batch of many programs on a small corpus gains (the reward bench's synthetic step
    in process, 1,000 products: 0.86x the time, 36% fewer Milvus searches; the service 0.96x, within its
    spread), one program at a time on a large one loses (``bench/scale.py`` at 1M products, cold caches: p50 L2
    55.4 against 31.9 ms, p95 L3 130 against 101 ms: fetching a 400-wide head's vectors costs more than the
    server's search among them). Off; on for an engine-bound batch on a small corpus."""
    exact_ties: bool = True
    """Settle a tie at a dense search's cut by id over the whole band of equal scores, as the ranking
    contract orders ties (:mod:`serving.engine.ties`): a placeholder's set is then its K best by ``(score,
    id)`` whatever the index, not whichever tied documents the store returned. Only a tie running past
    the search's margin costs anything (one to four range searches): with the hashing embedder at 1M products,
    which ties thousands, L3's p50 42 ms against 27 ms under all three passes, and no first result changed
    (``bench/scale.py``). On; off leaves the cut to the store, as before, for comparison."""

    def __post_init__(self) -> None:
        if self.mode not in PLANNING_MODES:
            raise ConfigError(
                f"{SECTION}.planning.mode must be one of {', '.join(PLANNING_MODES)}, got {self.mode!r}"
            )
        if not 0 <= self.chain_head_max <= MAX_HEAD_WIDTH:
            raise ConfigError(
                f"{SECTION}.planning.chain_head_max must be between 0 and {MAX_HEAD_WIDTH}, got {self.chain_head_max}"
            )
        if self.chain_head_docs < 0:
            raise ConfigError(
                f"{SECTION}.planning.chain_head_docs must be 0 or more, got {self.chain_head_docs}"
            )
        if self.mode == "fixed-k":  # the paper's semantics: no pass changes a placeholder's top-K
            for name in ("pushdown", "adaptive_k", "conditional"):
                object.__setattr__(self, name, False)
            object.__setattr__(self, "chain_head_docs", 0)

    def branches_at(self, rows: int) -> bool:
        """Whether chains within disjuncts are searched on a corpus of ``rows`` documents: under ``conditional``
        with ``conditional_branches``, where a chain's head widens (past ``chain_head_docs``), so that at or below
        that size a program means what it did.

        >>> on = PlanningOptions()
        >>> on.branches_at(5000), on.branches_at(50_000), PlanningOptions(conditional_branches=False).branches_at(50_000)
        (False, True, False)
        """
        return (
            self.conditional
            and self.conditional_branches
            and head_widens(self.chain_head_docs, self.chain_head_max, rows)
        )

    def head_width(self, k: int, rows: int) -> int:
        """The width a chain's head of ``k`` is searched at on a corpus of ``rows`` documents (``chain_head_docs``,
        ``chain_head_max``); ``k`` itself when the corpus is no larger than ``chain_head_docs``.

        >>> o = PlanningOptions()
        >>> o.head_width(20, 5000), o.head_width(20, 50_000), o.head_width(20, 1_000_000), o.head_width(500, 10**6)
        (20, 200, 400, 500)
        >>> PlanningOptions(chain_head_docs=0).head_width(20, 10**6), PlanningOptions(mode="fixed-k").head_width(20, 10**6)
        (20, 20)
        """
        if not head_widens(self.chain_head_docs, self.chain_head_max, rows):
            return k
        return max(k, min(-(-k * rows // self.chain_head_docs), self.chain_head_max))

    @classmethod
    def fixed_k(cls) -> PlanningOptions:
        """The paper's semantics: every placeholder its entry's top-K over the whole corpus."""
        return cls(mode="fixed-k")


@dataclass(frozen=True)
class SqlSettings:
    """How the engine hands a program's id sets to ClickHouse (:mod:`serving.engine.sqlrun`).

    Either way the SQL text comes only from the validated program's tree and the ids only from the
    index's searches; the results are the same (tested across both).
    """

    ids: Literal["bound", "literal"] = "bound"
    """``bound``: each placeholder becomes a query parameter, ``id IN {text_1: Array(String)}``, and the
    ids travel beside the statement (chDB ``params=``, clickhouse-connect ``parameters=``); the
    statement is rendered once per program, whatever its id sets, and batches name one parameter per
    distinct id set. ``literal``: the ids are written into the SQL as string literals,
    ``id IN ('P1', 'P2')``, rendered again for every new id set. ``bound`` is the default as measured by
    ``bench/engine.py`` (README, "Benchmarks"): its SQL stage equals literal ids' on a cold program
    (0.98-1.03x) and is faster for a statement seen before with new ids (0.85x), and a batch's SQL stays
    short (ClickHouse's ``max_query_size`` counts literals, not bound values)."""


FUSE_PARTNERS: tuple[str, ...] = ("none", "self-query")
"""What the query API may fuse the planner's programs with (:attr:`ApiSettings.fuse`)."""
FUSE_GATES: tuple[str, ...] = ("none", "unanimous", "familiar")
"""When a fusing query API lets the planner answer alone (:attr:`ApiSettings.fuse_gate`)."""


@dataclass(frozen=True)
class ApiSettings:
    """Limits and deadlines of the query API (``prore serve``, :mod:`serving.api`): the ``serving.api`` section.

    Defined here, not in :mod:`serving.api` (which re-exports it), because that package's service imports the
    engine, which imports this module.
    """

    max_body_bytes: int = 65_536
    """Largest request body; a larger one is answered 413."""
    max_nl_chars: int = 1_000
    """Longest natural-language request accepted, in characters; a longer one is answered 422."""
    max_k: int = 100
    """Most results one request may ask for (``k``); more is answered 422."""
    max_concurrent: int = 16
    """Requests under ``/v1/`` in flight at once; past it, 429 with ``Retry-After``."""
    retry_after_s: int = 1
    """Seconds a refused caller is told to wait (the ``Retry-After`` header)."""
    plan_deadline_s: float = 10.0
    """Planning deadline per request, in seconds: the planner's program, or the guided samples."""
    execute_deadline_s: float = 10.0
    """Engine deadline per request, in seconds: running the planner's program (or its guided samples)."""
    fallback_deadline_s: float = 10.0
    """Deadline of the BM25+dense fallback, in seconds."""
    fallback_on_empty: bool = True
    """A planner's program that runs and matches no document is answered like a failed one: a guided pass
    when that is on, then the fallback (``"reason": "program_empty"``). Measured as the evaluation's system
    ``planner-grounded:PATH?fallback=rrf`` (README, "Training the planner"): on unseen wording a quarter to a
    half of the programs match nothing, and the fallback lifts the ecommerce human split's P@1 from 0.200 to
    0.305. False answers with the empty result (``"source": "planner"``, no rows)."""
    fuse: str = "none"
    """``self-query``: every search's answer fuses the planner's programs (its program and, with
    ``serving.planner.guided_samples``, that many samples, drawn for every search) with the self-querying
    retriever's ranking (:mod:`serving.self_query`) by weighted reciprocal rank, the retriever weighted as all
    the planner's programs together (``"fusion"`` in the answer). A search none of whose programs runs goes to
    the fallback. Measured as the evaluation's ``seq2seq-grounded:RUN?samples=8&fuse=self-query`` (README,
    "Training the planner"): on held-out wording it is above both the planner and self-query alone; it costs
    the samples and one filtered dense search per text field on every search. ``none``: the planner's program
    answers alone."""
    fuse_gate: str = "none"
    """When, under ``fuse``, the planner's ranking answers alone; only the other searches are fused.

    - ``familiar``: the request is worded like the planner's training requests (:mod:`serving.familiarity`,
      the gate the planner card names, ``prore train familiarity``) and its program ranks something
      (``"fusion": {"familiar": true, "familiarity": <similarity>}``). It keeps the training templates' gold
      (test Hit@1) and fuses wording the planner never saw (README, "Training the planner").
    - ``unanimous``: the search's programs all rank the same (every one ran, and they agree;
      ``"fusion": {"unanimous": true}``). It keeps test Hit@1 too, and gives up some of the fusion's gain on
      unseen wording.
    - ``none``: every search is fused."""
    token: str | None = None
    """Bearer token ``/v1/*`` requires; None: no check (the loopback demo). ``prore serve --token-env VAR``
    reads it from the environment variable ``VAR`` instead of a file."""
    doc_cache_rows: int = 50_000
    """Result rows (per corpus and field list) kept in memory, so a repeated id is not fetched again."""
    warmup: bool = True
    """Run the fallback program once per corpus at start (loads the embedders before the first request)."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_nl_chars", "max_k", "max_concurrent", "retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"serving.api.{name} must be at least 1, got {value!r}", code="bad_limit")
        for name in ("plan_deadline_s", "execute_deadline_s", "fallback_deadline_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(
                    f"serving.api.{name} must be positive, got {getattr(self, name)!r}", code="bad_limit"
                )
        if self.fuse not in FUSE_PARTNERS:
            raise ConfigError(f"serving.api.fuse must be one of {', '.join(FUSE_PARTNERS)}, got {self.fuse!r}",
                              code="bad_fuse")  # fmt: skip
        if self.fuse_gate not in FUSE_GATES:
            raise ConfigError(f"serving.api.fuse_gate must be one of {', '.join(FUSE_GATES)}, got {self.fuse_gate!r}",
                              code="bad_fuse")  # fmt: skip
        if self.doc_cache_rows < 0:
            raise ConfigError(
                f"serving.api.doc_cache_rows must be 0 or more, got {self.doc_cache_rows}", code="bad_limit"
            )


def _check_ladder(name: str, ladder: tuple[int, ...], *, least: int) -> None:
    if not ladder or list(ladder) != sorted(set(ladder)) or ladder[0] < least:
        raise ConfigError(
            f"{SECTION}.dsl.{name} must be increasing whole numbers from {least} up, got {ladder}"
        )


def check_dsl_limits(limits: DslLimits) -> None:
    """Refuse limits no program could satisfy, or that contradict the language (DESIGN.md section 3)."""
    _check_ladder("k_ladder", limits.k_ladder, least=1)
    _check_ladder("rerank_ladder", limits.rerank_ladder, least=0)
    if limits.default_k not in limits.k_ladder:
        raise ConfigError(
            f"{SECTION}.dsl.default_k {limits.default_k} must be one of {SECTION}.dsl.k_ladder {limits.k_ladder}"
        )
    if limits.rrf_constant != DEFAULT_LIMITS.rrf_constant:
        # The ranking contract's constant (DESIGN.md section 3): rewards and answers depend on it.
        raise ConfigError(
            f"{SECTION}.dsl.rrf_constant is the ranking contract's constant and stays "
            f"{DEFAULT_LIMITS.rrf_constant}, got {limits.rrf_constant}"
        )
    if 0 not in limits.rerank_ladder:
        raise ConfigError(
            f"{SECTION}.dsl.rerank_ladder must hold 0 (no reranking), got {limits.rerank_ladder}"
        )
    for f in fields(limits):
        value = getattr(limits, f.name)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ConfigError(f"{SECTION}.dsl.{f.name} must be at least 1, got {value}")


@dataclass(frozen=True)
class ServingSettings:
    """What the engine and the program language are configured with."""

    dsl: DslLimits = field(default_factory=DslLimits)
    """Ladders, defaults and caps every program is checked against (DESIGN.md sections 3 and 6).
    Lowering a cap refuses more programs; the defaults are the language's."""
    engine: CacheSizes = field(default_factory=CacheSizes)
    """Entries kept by each of the engine's caches; 0 turns a cache off."""
    planning: PlanningOptions = field(default_factory=PlanningOptions)
    """What a placeholder means: the default engine (conditional evaluation with filter pushdown), or the
    paper's fixed K (``mode: fixed-k``); adaptive K is a further, optional pass."""
    sql: SqlSettings = field(default_factory=SqlSettings)
    """How id sets reach ClickHouse: bound query parameters or SQL literals."""
    api: ApiSettings = field(default_factory=ApiSettings)
    """Limits and deadlines of the query API (``prore serve``)."""
    planner: PlannerSettings = field(default_factory=lambda: PlannerSettings(output="grounded"))
    """The planner ``prore serve`` asks; its decoding defaults to ``grounded`` here, the one evaluation's
    ``planner-grounded:`` measured (the class's own default, ``json``, is the KServe runtime's)."""

    def __post_init__(self) -> None:
        check_dsl_limits(self.dsl)
        if self.planning.adaptive_k_max < self.dsl.k_ladder[0]:
            raise ConfigError(
                f"{SECTION}.planning.adaptive_k_max must be at least the smallest rung of "
                f"{SECTION}.dsl.k_ladder ({self.dsl.k_ladder[0]}), got {self.planning.adaptive_k_max}"
            )
        if self.engine.search_threads < 1:
            raise ConfigError(
                f"{SECTION}.engine.search_threads must be 1 or more, got {self.engine.search_threads}"
            )
        for f in fields(self.engine):
            if getattr(self.engine, f.name) < 0:
                raise ConfigError(
                    f"{SECTION}.engine.{f.name} must be 0 or more, got {getattr(self.engine, f.name)}"
                )


SECTIONS: tuple[Section, ...] = (Section(SECTION, ServingSettings),)
"""This layer's sections of the config file, registered by whoever loads it."""
