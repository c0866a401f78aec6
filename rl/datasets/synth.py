"""Benchmark synthesis: structure, leaves, gold program and verbalization, with two filters.

For each split, candidates are generated for the levels still short of their quota (each candidate
is a pure function of the seed, the split, the level and its attempt number, so a run is
deterministic), then

1. the structure-only super-query (every retrieval predicate replaced by TRUE) is counted on
   ClickHouse for a whole batch in one scan; a candidate whose candidate set is empty or too large
   (see :class:`Thresholds`) is dropped before any vector work;
2. the survivors run through :meth:`serving.engine.Engine.execute_many`; a candidate is kept only when
   its gold document comes out strictly first;
3. the accepted ones get their relevant sets (:mod:`rl.datasets.relevance`), one ClickHouse scan per
   batch, where the corpus has a label table; the gold document must be in its set.

The wording family is drawn before the leaves, since an extractive family says facets with the
document's own phrasing (:mod:`rl.datasets.verbalize`); a share of requests then goes through the noisy
wording of :mod:`rl.datasets.noise`, with a random stream of its own.

Accepted candidates fill the quotas in attempt order, and the splits are written atomically.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tqdm import tqdm

from indexing.config import Config
from indexing.corpora.files import has_labels, read_labels
from indexing.schema import DType, schema_for
from indexing.workspace import Workspace
from rl.datasets.compile import compile_tree
from rl.datasets.context import BenchContext, open_context
from rl.datasets.errors import BenchError
from rl.datasets.leaves import DomainFacts, LeafMaker
from rl.datasets.noise import NOISY_SHARE, add_noise, keeps_values
from rl.datasets.relevance import RelevanceJudge, RelevantSet
from rl.datasets.rewriter import Rewriter, RewriterConfig, keeps_anchors
from rl.datasets.store import DEFAULT_SIZES, RELEVANT_CAP, SPLITS, Instance, check_sizes, write_bench
from rl.datasets.structure import LEVELS, quotas, shape_for
from rl.datasets.tree import Node, leaves, modalities, operators, signed_leaves, to_json
from rl.datasets.verbalize import Family, families, family, verbalize
from serving.dsl.program import Program

L1_FROM_OWNERS = 0.9
"""Share of L1 candidates whose gold is drawn among documents some phrase ranks first."""


@dataclass(frozen=True)
class Thresholds:
    """When the structure-only super-query drops a candidate (before any vector search)."""

    min_candidates: int = 1
    """Fewer documents than this pass the structured conditions: the query can find nothing."""
    max_unranked_candidates: int = 8
    """A program without a positive retrieval ranks its result by id only, so its answer must be
    (nearly) unique: more structure-only candidates than this and the request is underspecified."""
    max_structured_fraction: float = 0.5
    """With structured conditions present, keeping more than this share of the corpus means they
    say almost nothing; a program made only of retrievals is exempt (its super-query is the corpus)."""


@dataclass(frozen=True)
class SynthConfig:
    """One synthesis run."""

    sizes: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    """Instances per split (``train``, ``test``, ``ood``)."""
    seed: int = 0
    """Seed of everything random: gold documents, structures, leaves, wording."""
    batch: int = 512
    """Most candidates generated per round (one super-query scan, one ``execute_many`` call)."""
    max_attempts_per_instance: int = 60
    """Give up on a split when it needs more candidates than this per requested instance."""
    max_attempts_without_progress: int = 20_000
    """Give up on a level when this many candidates in a row were not accepted: the vocabulary and
    corpus cannot say that many different requests of that level."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    rewriter: RewriterConfig | None = None
    """Rewrite every accepted request through this endpoint (cached), or keep the templates."""
    progress: bool = True
    """Show tqdm progress bars."""
    noisy_share: float = NOISY_SHARE
    """Share of requests of every split that go through the noisy wording (:mod:`rl.datasets.noise`)."""


@dataclass(frozen=True)
class Candidate:
    qid_seed: str
    gold_id: str
    level: int
    tree: Node
    program: Program
    nl: str
    family: str
    noisy: bool = False
    relevant: RelevantSet | None = None


@dataclass
class SplitStats:
    """What one split cost: attempts, rejections by reason and accepted instances per level."""

    attempts: Counter[int] = field(default_factory=Counter)
    accepted: Counter[int] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": {f"L{k}": v for k, v in sorted(self.attempts.items())},
            "accepted": {f"L{k}": v for k, v in sorted(self.accepted.items())},
            "rejected": dict(sorted(self.rejected.items())),
        }


def is_first(result: Any, gold_id: str) -> bool:
    """Whether ``gold_id`` is strictly first: ranked first and not tied with the second (a tie
    would be broken by id alone, which no request can express)."""
    ids, scores = tuple(result.ids), tuple(result.scores)
    if not ids or ids[0] != gold_id:
        return False
    return len(ids) == 1 or scores[0] > scores[1]


class _SplitRun:
    def __init__(
        self,
        ctx: BenchContext,
        cfg: SynthConfig,
        split: str,
        seen_nl: set[str],
        facts: DomainFacts | None = None,
        judge: RelevanceJudge | None = None,
    ) -> None:
        self.ctx, self.cfg, self.split = ctx, cfg, split
        self.facts = facts or ctx.facts
        self.judge = judge
        self.ood = split == "ood"
        self.families: tuple[Family, ...] = families(self.ood)
        self.pool = ctx.gold_pool(split)
        self.l1_pool = ctx.single_condition_pool(split) or self.pool
        self.seen_nl = seen_nl
        self.stats = SplitStats()
        self.next_attempt: Counter[int] = Counter()
        self.last_accept: Counter[int] = Counter()

    def _why_short(self) -> str:
        """Why a split runs short: a generated corpus is asked too much; a loaded one has few facets."""
        if self.judge is not None:
            return "the corpus and vocabulary cannot say that many different requests: ask for fewer"
        found = len({key for keys in self.facts.facets.values() for key in keys})
        return (
            f"{NO_LABELS}, so a request can name only its structured values and the {found} vocabulary "
            f"facets its text carries: ask for fewer, or synthesize on a generated corpus "
            f"(prore corpus build {self.ctx.domain} --size N)"
        )

    def draw(self, level: int, attempt: int) -> tuple[random.Random, int]:
        """The attempt's random stream and the corpus row of its gold document."""
        rng = random.Random(f"{self.cfg.seed}:{self.ctx.domain}:{self.split}:{level}:{attempt}")
        # A one-condition query has a gold document only where that condition ranks it first.
        pool = self.l1_pool if level == 1 and rng.random() < L1_FROM_OWNERS else self.pool
        return rng, pool[rng.randrange(len(pool))]

    def candidate(
        self, level: int, attempt: int, rng: random.Random, doc: Mapping[str, Any]
    ) -> Candidate | None:
        """The candidate of ``attempt`` from its :meth:`draw`: ``rng`` goes on, ``doc`` is the gold document."""
        fam = rng.choice(self.families)
        maker = LeafMaker(
            self.facts, self.ctx.book, self.ctx.ranks, doc, rng, ood=self.ood, extractive=fam.extractive
        )
        tree = maker.fill(shape_for(level, rng), level)
        if tree is None:
            self.stats.rejected["no_leaves"] += 1
            return None
        nl = verbalize(tree, self.ctx.domain, fam, rng)
        if not fam.extractive and self.ctx.leaks(nl, doc):
            self.stats.rejected["copies_document"] += 1
            return None
        noise_rng = random.Random(f"{self.cfg.seed}:{self.ctx.domain}:{self.split}:{level}:{attempt}:noise")
        noisy = noise_rng.random() < self.cfg.noisy_share
        if noisy:
            values = _anchors(tree)
            new = add_noise(nl, values, noise_rng, ood=self.ood)
            noisy = new != nl and keeps_values(new, values)
            nl = new if noisy else nl
        if nl in self.seen_nl:
            self.stats.rejected["duplicate"] += 1
            return None
        program = compile_tree(tree, self.ctx.schema.table)
        return Candidate(f"{level}:{attempt}", str(doc["id"]), level, tree, program, nl, fam.name, noisy)

    def generate(self, need: Mapping[int, int], yields: Mapping[int, float]) -> list[Candidate]:
        draws: list[tuple[int, int, random.Random, int]] = []
        budget = self.cfg.batch
        for level in LEVELS:
            if need.get(level, 0) <= 0:
                continue
            # Oversample by the yield seen so far, so most rounds finish a level in one go.
            want = min(budget, max(16, int(need[level] / max(yields[level], 0.02) * 1.2)))
            for _ in range(want):
                attempt = self.next_attempt[level]
                self.next_attempt[level] += 1
                self.stats.attempts[level] += 1
                draws.append((level, attempt, *self.draw(level, attempt)))
        # The round's gold documents come from the index in one query, not one query per candidate.
        docs = self.ctx.rows([row for *_, row in draws])
        out: list[Candidate] = []
        for (level, attempt, rng, _), doc in zip(draws, docs, strict=True):
            c = self.candidate(level, attempt, rng, doc)
            if c is not None:
                out.append(c)
        return out

    def super_filter(self, cands: list[Candidate]) -> list[Candidate]:
        counts = self.ctx.super_counts([(c.program, c.gold_id) for c in cands])
        th = self.cfg.thresholds
        kept = []
        for c, count in zip(cands, counts, strict=True):
            if count is None:
                self.stats.rejected["invalid_program"] += 1
                continue
            n, has_gold = count
            structured = any(not leaf.semantic for leaf in leaves(c.tree))
            ranked = any(leaf.semantic and not neg for leaf, neg in signed_leaves(c.tree))
            if not has_gold:
                self.stats.rejected["super_query_misses_gold"] += 1
            elif n < th.min_candidates:
                self.stats.rejected["super_query_empty"] += 1
            elif not ranked and n > th.max_unranked_candidates:
                self.stats.rejected["super_query_not_unique"] += 1
            elif ranked and structured and n > th.max_structured_fraction * self.ctx.corpus_rows:
                self.stats.rejected["super_query_too_broad"] += 1
            else:
                kept.append(c)
        return kept

    def rank_filter(self, cands: list[Candidate]) -> list[Candidate]:
        results = self.ctx.engine.execute_many([c.program for c in cands], k=3)
        kept = []
        for c, r in zip(cands, results, strict=True):
            if isinstance(r, Exception):
                self.stats.rejected[f"execution_{getattr(r, 'code', 'error')}"] += 1
            elif is_first(r, c.gold_id):
                kept.append(c)
            else:
                self.stats.rejected["gold_not_first"] += 1
        return kept

    def relevance_filter(self, cands: list[Candidate]) -> list[Candidate]:
        """The candidates with their relevant sets; one whose gold is not relevant is dropped (a fault
        between the labels and the facets leaves were made from, counted as ``gold_not_relevant``)."""
        if self.judge is None or not cands:
            return cands
        kept = []
        for c, rel in zip(cands, self.judge.relevant_sets([(c.tree, c.gold_id) for c in cands]), strict=True):
            if rel.has_gold:
                kept.append(replace(c, relevant=rel))
            else:
                self.stats.rejected["gold_not_relevant"] += 1
        return kept

    def run(self, size: int) -> list[Candidate]:
        target = quotas(size)
        got: dict[int, list[Candidate]] = {lvl: [] for lvl in LEVELS}
        bar = tqdm(
            total=size, desc=f"{self.ctx.domain} {self.split}", unit="q", disable=not self.cfg.progress
        )
        limit = self.cfg.max_attempts_per_instance * size + 200
        try:
            while True:
                need = {lvl: target[lvl] - len(got[lvl]) for lvl in LEVELS}
                if all(n <= 0 for n in need.values()):
                    break
                stalled = [
                    lvl for lvl in LEVELS
                    if need[lvl] > 0
                    and self.stats.attempts[lvl] - self.last_accept[lvl] >= self.cfg.max_attempts_without_progress
                ]  # fmt: skip
                if stalled or sum(self.stats.attempts.values()) >= limit:
                    short = ", ".join(f"L{k}: {v}" for k, v in need.items() if v > 0)
                    raise BenchError(
                        f"could not synthesize the {self.ctx.domain} {self.split} split: still short of {short} "
                        f"after {sum(self.stats.attempts.values())} candidates; {self._why_short()}",
                        code="bench_yield",
                    )
                yields = {
                    lvl: (self.stats.accepted[lvl] + 1) / (self.stats.attempts[lvl] + 2) for lvl in LEVELS
                }
                batch = self.rank_filter(self.super_filter(self.generate(need, yields)))
                taken: list[Candidate] = []
                room = dict(need)
                for c in batch:
                    if room[c.level] > 0 and c.nl not in self.seen_nl and c.nl not in {t.nl for t in taken}:
                        taken.append(c)
                        room[c.level] -= 1
                for c in self.relevance_filter(taken):
                    got[c.level].append(c)
                    self.seen_nl.add(c.nl)
                    self.stats.accepted[c.level] += 1
                    self.last_accept[c.level] = self.stats.attempts[c.level]
                    bar.update(1)
                bar.set_postfix(
                    accept=f"{sum(self.stats.accepted.values()) / max(sum(self.stats.attempts.values()), 1):.0%}"
                )
        finally:
            bar.close()
        # Mix the levels (deterministically), so that a prefix of a split is a fair sample of it.
        ordered = [c for lvl in LEVELS for c in got[lvl]]
        rng = random.Random(f"{self.cfg.seed}:{self.ctx.domain}:{self.split}:order")
        rng.shuffle(ordered)
        return ordered


def _anchors(tree: Node) -> list[str]:
    out: list[str] = []
    for leaf in leaves(tree):
        if leaf.semantic:
            continue
        for v in leaf.values:
            if isinstance(v, str) and not leaf.transform and leaf.field not in ("date", "release_date"):
                out.append(v)
    return out


def _instances(
    ctx: BenchContext, split: str, cands: Sequence[Candidate], rewriter: Rewriter | None, progress: bool
) -> list[Instance]:
    rewrites = rewriter.rewrite_many([c.nl for c in cands], progress=progress) if rewriter else None
    golds = ctx.docs_by_id([c.gold_id for c in cands]) if rewrites is not None else []
    out = []
    for n, c in enumerate(cands):
        nl, rewritten = c.nl, False
        if rewrites is not None:
            # A rewrite that drops a value, or copies the document's words into a paraphrasing request, is not kept.
            new = rewrites[n]
            leaks = not family(c.family).extractive and ctx.leaks(new, golds[n])
            if new and keeps_anchors(new, _anchors(c.tree)) and not leaks:
                nl, rewritten = new, True
        out.append(
            Instance(
                qid=f"{ctx.domain}-{split}-{n:06d}",
                split=split,
                domain=ctx.domain,
                nl=nl,
                program=c.program.to_json(),
                gold_id=c.gold_id,
                level=f"L{c.level}",
                modalities=tuple(modalities(c.tree)),
                family=c.family,
                operators=tuple(operators(c.tree)),
                tree=json.dumps(to_json(c.tree), ensure_ascii=False),
                rewritten=rewritten,
                noisy=c.noisy and not rewritten,
                relevant_n=None if c.relevant is None else c.relevant.n,
                relevant_ids=() if c.relevant is None else c.relevant.ids,
                relevant_capped=c.relevant is not None and c.relevant.capped,
            )
        )
    return out


def synthesize(
    cfg: Config,
    domain: str,
    scfg: SynthConfig,
    *,
    out: Workspace | None = None,
    opener: Callable[[Config, str, SynthConfig], BenchContext] | None = None,
) -> dict[str, Any]:
    """Synthesize the ``train``, ``test`` and ``ood`` splits of ``domain`` and write them to the
    workspace (or to ``out``); returns the manifest. ``opener`` replaces :func:`open_context` (a test
    passes one that shares an open engine)."""
    schema_for(domain)
    check_sizes(scfg.sizes)
    t0 = time.perf_counter()
    if opener is None:
        ctx = open_context(cfg, domain, seed=scfg.seed, sizes=scfg.sizes, progress=scfg.progress)
    else:
        ctx = opener(cfg, domain, scfg)
    setup_s = time.perf_counter() - t0
    ws = out or Workspace(cfg.workspace)
    rewriter = Rewriter(scfg.rewriter, ws.cache_dir / "rewriter") if scfg.rewriter else None
    judge: RelevanceJudge | None = None
    try:
        facts = replace(ctx.facts, dates=corpus_dates(ctx))
        labels = read_labels(Workspace(cfg.workspace), domain)
        if labels is None and not any(facts.facets.values()):
            raise BenchError(
                f"the {domain} corpus has no label table and its text carries none of the vocabulary's facets, "
                "so its requests could name only structured values, which seldom single out one document; "
                f"synthesize on a generated corpus (prore corpus build {domain} --size N)",
                code="bench_no_facets",
            )
        # Extractive families search the documents' own phrasings: rank those too.
        ctx.ranks.fill(ctx.engine, ctx.schema, document_phrase_pairs(ctx), progress=scfg.progress)
        if labels is not None:
            handle = ctx.engine.handle
            judge = RelevanceJudge(handle.sql, handle.table, ctx.schema.table, labels)
        seen: set[str] = set()
        splits: dict[str, list[Instance]] = {}
        stats: dict[str, Any] = {}
        for split in SPLITS:
            t_split = time.perf_counter()
            run = _SplitRun(ctx, scfg, split, seen, facts, judge)
            cands = run.run(scfg.sizes[split])
            splits[split] = _instances(ctx, split, cands, rewriter, scfg.progress)
            stats[split] = {**run.stats.as_dict(), "seconds": round(time.perf_counter() - t_split, 2)}
        elapsed = time.perf_counter() - t0
        total = sum(len(v) for v in splits.values())
        manifest = {
            "seed": scfg.seed,
            "sizes": dict(scfg.sizes),
            "levels": {s: dict(sorted(Counter(i.level for i in v).items())) for s, v in splits.items()},
            "families": {s: sorted({i.family for i in v}) for s, v in splits.items()},
            "distinct_programs": {s: len({i.program for i in v}) for s, v in splits.items()},
            "distinct_nl": {s: len({i.nl for i in v}) for s, v in splits.items()},
            "extractive_share": {
                s: round(sum(family(i.family).extractive for i in v) / max(len(v), 1), 4)
                for s, v in splits.items()
            },
            "noisy_share": {s: round(sum(i.noisy for i in v) / max(len(v), 1), 4) for s, v in splits.items()},
            "relevance": relevance_summary(splits, available=judge is not None),
            "dates": {k: [a.isoformat(), b.isoformat()] for k, (a, b) in facts.dates.items()},
            "distinct_gold": {s: len({i.gold_id for i in v}) for s, v in splits.items()},
            "corpus_fingerprint": ctx.corpus_fingerprint,
            "corpus_rows": ctx.corpus_rows,
            "index_version": ctx.index_version,
            "planning": asdict(ctx.engine.planning),
            "disjoint_gold": ctx.disjoint_gold,
            "thresholds": vars(scfg.thresholds),
            "rank_filter": "gold strictly first (ranked first, not tied with the second)",
            "stats": stats,
            "elapsed_s": round(elapsed, 2),
            "setup_s": round(setup_s, 2),
            "instances_per_s": round(total / max(elapsed, 1e-9), 2),
            "instances_per_s_after_setup": round(total / max(elapsed - setup_s, 1e-9), 2),
            "rewriter": None
            if rewriter is None
            else {
                "url": rewriter.cfg.url,
                "model": rewriter.cfg.model,
                "sent": rewriter.sent,
                "cached": rewriter.cached,
            },
        }
        return write_bench(ws, domain, splits, manifest)
    finally:
        if judge is not None:
            judge.close()
        ctx.close()


NO_LABELS = "the corpus has no label table (it was loaded from real data, not generated)"
"""Why a benchmark has no relevant sets, as manifests and reports say it."""


def synthesize_domains(
    cfg: Config,
    domains: Sequence[str],
    scfg: SynthConfig,
    *,
    out: Workspace | None = None,
    opener: Callable[[Config, str, SynthConfig], BenchContext] | None = None,
) -> list[dict[str, Any]]:
    """:func:`synthesize` each of ``domains``, side by side: one thread per domain, each on its own engine over
    the process's one chDB session, so one domain's Python work runs while the other's waits on chDB or Milvus
    (1.4x on 2 cores for the two demo corpora). Each benchmark is the one a run of its own writes (same seed, same
    instances). With a rewriter, whose cache is one folder, the domains run one after the other. Returns the
    manifests in the order of ``domains``; the first failure is raised once every domain has finished."""
    from concurrent.futures import ThreadPoolExecutor

    if len(domains) <= 1 or scfg.rewriter is not None:
        return [synthesize(cfg, d, scfg, out=out, opener=opener) for d in domains]
    with ThreadPoolExecutor(max_workers=len(domains), thread_name_prefix="synth") as pool:
        futures = [pool.submit(synthesize, cfg, d, scfg, out=out, opener=opener) for d in domains]
        return [f.result() for f in futures]


def unlabeled_note(domain: str, manifest: Mapping[str, Any]) -> str | None:
    """What synthesis on a corpus without a label table judges and what it cannot (``None`` with labels)."""
    if has_labels(dict(manifest)):
        return None
    return (
        f"note: the {domain} corpus (source {manifest.get('source', 'unknown')}) has no label table: requests "
        "are made from its structured values and the vocabulary's facets found in its text, each kept when "
        "its gold document ranks first; relevant sets (P@k, nDCG) are not computed"
    )


def relevance_summary(splits: Mapping[str, Sequence[Instance]], *, available: bool) -> dict[str, Any]:
    """Relevant-set sizes per split and level (min, median, mean, p90, max, capped), or why there are none."""
    if not available:
        return {"available": False, "reason": NO_LABELS}
    out: dict[str, Any] = {"available": True, "cap": RELEVANT_CAP, "sizes": {}}
    for split, items in splits.items():
        out["sizes"][split] = {
            level: size_stats([i.relevant_n for i in items if i.level == level and i.relevant_n is not None])
            for level in sorted({i.level for i in items})
        }
    return out


def size_stats(sizes: Sequence[int]) -> dict[str, float | int]:
    """Distribution of relevant-set sizes."""
    if not sizes:
        return {"n": 0}
    ordered = sorted(sizes)
    return {
        "n": len(ordered),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "mean": round(statistics.fmean(ordered), 2),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
        "single": sum(1 for x in ordered if x == 1),
        "capped": sum(1 for x in ordered if x > RELEVANT_CAP),
    }


def corpus_dates(ctx: BenchContext) -> dict[str, tuple[dt.date, dt.date]]:
    """First and last day of each date field of the corpus (one query on its table)."""
    names = [f.name for f in ctx.schema.fields if f.dtype in (DType.DATE, DType.DATETIME)]
    if not names:
        return {}
    handle = ctx.engine.handle
    cols = ", ".join(f"min(toDate(`{n}`)), max(toDate(`{n}`))" for n in names)
    row = handle.sql.query(f"SELECT {cols} FROM {handle.table}")[0]
    return {n: (_day(row[2 * j]), _day(row[2 * j + 1])) for j, n in enumerate(names)}


def _day(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    return dt.date.fromisoformat(str(v)[:10])


def document_phrase_pairs(ctx: BenchContext) -> list[tuple[str, str]]:
    """Every (field, document phrasing) an extractive request may search."""
    return [
        (name, phrase)
        for name, keys in ctx.facts.facets.items()
        for key in keys
        for phrase in ctx.book.doc_phrasings(key)
    ]
