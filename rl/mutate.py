"""Verified structural mutation (RPL, "Learning to Program Retrievals"): repair a program by its nearest
mutant that a verifier accepts.

**Grammar.** A mutant changes only a program's retrieval entries; its SQL conditions stay. Each entry of
the original program is a *slot*; a slot is a set of retrieval calls on the slot's field, fused:

- a *query subset*: the phrases the slot searches, drawn from the program's own queries of the slot's
  modality (a program holds at most :data:`MAX_QUERIES` distinct queries; a mutant never adds one). A slot
  with several queries is fused: ``id IN <text_1>`` becomes ``(id IN <text_1> OR id IN <text_2>)``, a union
  ranked by the reciprocal-rank sum of the ranking contract. Only slots used positively (``id IN``) fuse;
- a *mode* in {dense, sparse, fuse};
- a *width* ``k`` in {3, 5, 10, 20, 50} and a *rerank* depth in {0, 3, 5, 10, 20} (``rerank <= k``);
- no duplicate calls (two equal entries), and at most :data:`MAX_OUTPUT` output documents per slot
  (a call outputs ``rerank`` documents when it reranks, else ``k``).

**Distance.** Lexicographic over (mode changes, rerank added or removed, query-subset changes, width
steps on the ladder, rerank steps on the ladder); ties are broken by the candidate count (documents the
calls output) and then the call count, so the cheaper of two equally near mutants comes first.

**Search.** :func:`verified_mutation` enumerates mutants nearest first (best-first over the slots, never
the whole product), executes them in batches with ``Engine.execute_many`` and returns the first that the
verifier accepts. The gold document and the relevant set are visible only to the verifier: mutants are
built from the program alone.

>>> from serving.dsl import Program, Retrieval
>>> from indexing.schema import PRODUCTS
>>> p = Program("SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", "quiet", k=3),))
>>> first = next(mutants(p, PRODUCTS))
>>> first.program.retrieval_list[0].k, first.distance
(5, (0, 0, 0, 1, 0))
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sqlglot import exp

from core.errors import ProReError
from indexing.schema import CorpusSchema
from serving.dsl import DEFAULT_LIMITS, DslLimits, Program, Retrieval, validate
from serving.dsl.placeholders import restore_placeholders, sentinel_of
from serving.dsl.program import MODES, Mode, placeholder_name
from serving.engine import ExecutionResult

MAX_QUERIES = 4
"""Most distinct queries a program's slots draw from (RPL's grammar)."""
MAX_OUTPUT = 20
"""Most documents one slot outputs (RPL's grammar; the paper's K)."""
DEFAULT_BUDGET = 64
MAX_BUDGET = 256
BATCH = 16
"""Mutants executed per ``execute_many`` call; the search stops after the first batch with an accepted one."""

Distance = tuple[int, int, int, int, int]
Verifier = Callable[[ExecutionResult], bool]
"""Says whether an executed mutant is right; the only holder of the gold or relevant set."""


class MutationError(ProReError):
    """A mutation search cannot run as asked (bad budget, invalid program)."""

    code = "mutation"


@dataclass(frozen=True)
class SlotChoice:
    """What one slot becomes: its queries, mode, width and rerank depth."""

    queries: tuple[str, ...]
    mode: Mode
    k: int
    rerank: int

    @property
    def output(self) -> int:
        return len(self.queries) * (self.rerank or self.k)


@dataclass(frozen=True)
class Mutant:
    """A mutant program, its distance from the original, and its tie-breakers."""

    program: Program
    distance: Distance
    candidates: int
    calls: int


@dataclass(frozen=True)
class Repair:
    """The outcome of a search: the accepted mutant (or None) and how many mutants were executed."""

    mutant: Mutant | None
    executed: int


def _steps(ladder: Sequence[int], a: int, b: int) -> int:
    return abs(ladder.index(a) - ladder.index(b)) if a in ladder and b in ladder else len(ladder)


def _rerank_cost(limits: DslLimits, orig: int, new: int) -> tuple[int, int]:
    """(added or removed, ladder steps); a rerank added at the smallest depth costs no steps."""
    ladder = limits.rerank_ladder
    if (orig > 0) != (new > 0):
        nonzero = new or orig
        return 1, _steps(ladder, ladder[1], nonzero) if len(ladder) > 1 else 0
    if orig == 0:
        return 0, 0
    return 0, _steps(ladder, orig, new)


def _slot_options(
    entry: Retrieval, pool: Sequence[str], fusable: bool, limits: DslLimits
) -> list[tuple[tuple[int, ...], SlotChoice]]:
    """Every choice of a slot with its cost vector (distance..., candidates, calls), nearest first."""
    subsets: list[tuple[str, ...]] = [(entry.query,)]
    if fusable:
        others = [q for q in pool if q != entry.query]
        for r in range(0, len(others) + 1):
            for extra in itertools.combinations(others, r):
                for keep in (True, False):
                    qs = ((entry.query,) if keep else ()) + extra
                    if qs and qs != (entry.query,):
                        subsets.append(qs)
    out: list[tuple[tuple[int, ...], SlotChoice]] = []
    for qs in dict.fromkeys(subsets):
        changed = len(set(qs) ^ {entry.query})
        for mode in MODES:
            for k in limits.k_ladder:
                for rerank in limits.rerank_ladder:
                    if rerank > k:
                        continue
                    choice = SlotChoice(qs, mode, k, rerank)
                    same = choice == SlotChoice((entry.query,), entry.mode, entry.k, entry.rerank)
                    if choice.output > MAX_OUTPUT and not same:
                        continue
                    toggled, rsteps = _rerank_cost(limits, entry.rerank, rerank)
                    cost = (int(mode != entry.mode), toggled, changed, _steps(limits.k_ladder, entry.k, k), rsteps,
                            choice.output, len(qs))  # fmt: skip
                    out.append((cost, choice))
    out.sort(key=lambda pair: (pair[0], pair[1].queries, pair[1].mode, pair[1].k, pair[1].rerank))
    return out


def _rewrite(
    program: Program, schema: CorpusSchema, choices: Sequence[SlotChoice], limits: DslLimits
) -> Program:
    """The program with slot ``i`` replaced by the calls of ``choices[i]``, renumbered, fused where asked."""
    numbers: list[list[int]] = []
    entries: list[Retrieval] = []
    for old, choice in zip(program.retrieval_list, choices, strict=True):
        nums = []
        for q in choice.queries:
            entries.append(Retrieval(old.type, old.field, q, choice.mode, choice.k, choice.rerank))
            nums.append(len(entries))
        numbers.append(nums)
    if len(entries) == len(choices):
        return Program(
            sql=program.sql, retrieval_list=tuple(entries)
        )  # nothing fused: same SQL, same numbers

    def renumber(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.In):
            return node
        found = sentinel_of(node.args.get("field"))
        if found is None:
            return node
        modality, number = found
        calls = [exp.In(this=node.this.copy(), field=exp.column(placeholder_name(modality, n - 1)))
                 for n in numbers[number - 1]]  # fmt: skip
        if len(calls) == 1:
            return calls[0]
        fused: exp.Expr = calls[0]
        for call in calls[1:]:
            fused = exp.Or(this=fused, expression=call)
        return exp.Paren(this=fused)

    tree = validate(program, schema, limits).tree.copy().transform(renumber)
    sql = restore_placeholders(tree).sql(dialect="clickhouse", comments=False)
    return Program(sql=sql, retrieval_list=tuple(entries))


def _fusable(program: Program, schema: CorpusSchema, limits: DslLimits) -> list[bool]:
    v = validate(program, schema, limits)
    uses: dict[int, list[bool]] = {}
    for use in v.placeholders:
        uses.setdefault(use.entry, []).append(use.positive)
    return [all(uses.get(i, [False])) for i in range(len(program.retrieval_list))]


def mutants(
    program: Program, schema: CorpusSchema, *, limits: DslLimits = DEFAULT_LIMITS
) -> Iterator[Mutant]:
    """Every mutant of ``program`` in the grammar, nearest first (the program itself excluded).

    Built from the program alone: nothing about the answer enters here.
    """
    entries = program.retrieval_list
    if not entries:
        return
    fusable = _fusable(program, schema, limits)
    pools: dict[str, list[str]] = {}
    for e in entries:
        pool = pools.setdefault(e.type, [])
        if e.query not in pool and len({q for qs in pools.values() for q in qs}) < MAX_QUERIES:
            pool.append(e.query)
    options = [_slot_options(e, pools[e.type], f, limits) for e, f in zip(entries, fusable, strict=True)]

    def key(index: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        total = tuple(sum(c) for c in zip(*(options[s][i][0] for s, i in enumerate(index)), strict=True))
        return total, index

    start = tuple(0 for _ in options)
    heap = [key(start)]
    seen = {start}
    while heap:
        cost, index = heapq.heappop(heap)
        for s in range(len(options)):
            nxt = (*index[:s], index[s] + 1, *index[s + 1 :])
            if nxt[s] < len(options[s]) and nxt not in seen:
                seen.add(nxt)
                heapq.heappush(heap, key(nxt))
        if index == start:
            continue
        choices = [options[s][i][1] for s, i in enumerate(index)]
        mutant = _rewrite(program, schema, choices, limits)
        if len(set(mutant.retrieval_list)) < len(mutant.retrieval_list):
            continue  # a duplicate call
        yield Mutant(mutant, (cost[0], cost[1], cost[2], cost[3], cost[4]), cost[5], cost[6])


def repair(program: Program, verifier: Verifier, *, engine: object, budget: int = DEFAULT_BUDGET,
           k: int = 20, limits: DslLimits = DEFAULT_LIMITS) -> Repair:  # fmt: skip
    """Search the nearest accepted mutant, executing at most ``budget`` mutants (see the module docstring).

    ``engine`` is a :class:`serving.engine.Engine` (its index's schema types the program).
    """
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= MAX_BUDGET:
        raise MutationError(
            f"budget must be between 1 and {MAX_BUDGET}, got {budget!r}", code="mutation_budget"
        )
    schema: CorpusSchema = engine.handle.schema  # type: ignore[attr-defined]
    stream = mutants(program, schema, limits=limits)
    executed = 0
    while executed < budget:
        batch = list(itertools.islice(stream, min(BATCH, budget - executed)))
        if not batch:
            break
        results = engine.execute_many([m.program for m in batch], k=k)  # type: ignore[attr-defined]
        executed += len(batch)
        for m, result in zip(batch, results, strict=True):
            if isinstance(result, ExecutionResult) and verifier(result):
                return Repair(m, executed)
    return Repair(None, executed)


def verified_mutation(program: Program, verifier: Verifier, budget: int = DEFAULT_BUDGET, *,
                      engine: object, k: int = 20) -> Mutant | None:  # fmt: skip
    """The nearest mutant of ``program`` that ``verifier`` accepts, trying at most ``budget`` (<= 256), or None."""
    return repair(program, verifier, engine=engine, budget=budget, k=k).mutant
