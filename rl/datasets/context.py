"""Everything synthesis reads once per domain: the engine, value and facet statistics of the corpus,
the gold-width retrieval ranks of every query phrase, and the gold-document pools of the splits.

The corpus is never held in memory as a whole: its statistics are streamed from the corpus files, a
few columns at a time, and documents are fetched from the index by id when synthesis needs them (in
one query per batch of candidates). Super-queries are counted by :func:`serving.engine.count.count_many`.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp
from tqdm import tqdm

from indexing.config import Config
from indexing.corpora.files import corpus_manifest, part_paths
from indexing.schema import CorpusSchema, schema_for
from indexing.workspace import Workspace
from rl.datasets.errors import BenchError
from rl.datasets.leaves import CATEGORICAL, DomainFacts
from rl.datasets.phrases import PhraseBook
from rl.datasets.store import SPLITS
from serving.dsl.limits import DEFAULT_LIMITS
from serving.dsl.program import Program, Retrieval

if TYPE_CHECKING:
    from serving.engine import Engine

FACET_SAMPLE = 20_000
"""Documents scanned to learn which facets each field carries (all of them in a smaller corpus)."""
PROBE_BATCH = 512
"""Probe programs per ``execute_many`` call when ranking every query phrase."""
SUPER_BATCH = 64
"""Super-queries counted in one ClickHouse scan (two counts each)."""
STREAM_ROWS = 10_000
"""Rows per batch when streaming columns of the corpus files."""
FETCH_BATCH = 1_000
"""Documents fetched from the index in one query."""
MIN_POOL_DOCS = 30
"""Below this many gold documents per side, train and the evaluation splits share one pool."""


class RankTable:
    """The gold-width ranked ids of each (field, phrase), computed once through the engine."""

    def __init__(self) -> None:
        self._ranks: dict[tuple[str, str], dict[str, int]] = {}
        self._first: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._ranks)

    def rank(self, fieldname: str, phrase: str, doc_id: str) -> int | None:
        """1-based rank of ``doc_id`` for ``phrase`` on ``fieldname``, or ``None``."""
        return self._ranks.get((fieldname, phrase), {}).get(doc_id)

    def first(self, fieldname: str, phrase: str) -> str | None:
        """The id ranked first for ``phrase`` on ``fieldname``."""
        return self._first.get((fieldname, phrase))

    def fill(
        self,
        engine: Engine,
        schema: CorpusSchema,
        pairs: Iterable[tuple[str, str]],
        *,
        progress: bool = False,
    ) -> None:
        """Rank the ``(field, phrase)`` pairs not seen yet, with one-entry probe programs."""
        from serving.engine.results import candidate_name

        todo = sorted({p for p in pairs if p not in self._ranks})
        bar = tqdm(total=len(todo), desc=f"{schema.domain} phrases", unit="q", disable=not progress)
        for start in range(0, len(todo), PROBE_BATCH):
            chunk = todo[start : start + PROBE_BATCH]
            programs = []
            for fieldname, phrase in chunk:
                kind = "image" if fieldname in schema.image_fields else "text"
                entry = Retrieval(kind, fieldname, phrase, k=DEFAULT_LIMITS.default_k)  # type: ignore[arg-type]
                programs.append(
                    Program(
                        f"SELECT DISTINCT id FROM {schema.table} WHERE id IN {Program.placeholder(0, entry)}",
                        (entry,),
                    )
                )
            results = engine.execute_many(programs, k=1)
            for (fieldname, phrase), (prog, res) in zip(
                chunk, zip(programs, results, strict=True), strict=True
            ):
                if isinstance(res, Exception):
                    raise BenchError(f"probing {fieldname} for {phrase!r} failed: {res}", code="bench_probe")
                ids = res.candidates[candidate_name(0, prog.retrieval_list[0])]
                self._ranks[(fieldname, phrase)] = {d: i for i, d in enumerate(ids, start=1)}
                if ids:
                    self._first[(fieldname, phrase)] = ids[0]
            bar.update(len(chunk))
        bar.close()


class BenchContext:
    """What one domain's synthesis shares across splits.

    ``seed`` and the split ``sizes`` decide the gold-document pools; ``progress`` shows the ranking bars.
    """

    def __init__(
        self,
        cfg: Config,
        domain: str,
        engine: Engine,
        *,
        seed: int,
        sizes: Mapping[str, int],
        progress: bool = False,
        owns_engine: bool = False,
    ) -> None:
        self.cfg, self.domain, self.engine = cfg, domain, engine
        self.seed, self.sizes = seed, dict(sizes)
        self.owns_engine = owns_engine
        self.schema = schema_for(domain)
        ws = Workspace(cfg.workspace)
        manifest = corpus_manifest(ws, domain)
        self.corpus_fingerprint = str(manifest.get("fingerprint"))
        self.index_version = str(getattr(engine.handle, "version", "unknown"))
        built_from = getattr(engine.handle, "meta", {}).get("corpus_fingerprint")
        if built_from and built_from != self.corpus_fingerprint:
            raise BenchError(
                f"the {domain} index was built from another corpus ({built_from}, workspace has "
                f"{self.corpus_fingerprint}); run: prore index build {domain}",
                code="bench_stale_index",
            )
        self._ws = ws
        self._ids: list[str] = [
            str(v) for batch in self._stream(["id"]) for v in batch.column("id").to_pylist()
        ]
        """Document ids in corpus order: row ``i`` of the corpus is ``_ids[i]``."""
        self.corpus_rows = len(self._ids)
        if self.corpus_rows == 0:
            raise BenchError(f"the {domain} corpus is empty", code="bench_corpus")
        self.book = PhraseBook(domain)
        self.facts = self._facts()
        self.ranks = RankTable()
        self._pools = self._make_pools()
        self._owners: dict[bool, frozenset[str]] = {}
        for ood in (False, True):
            self.ranks.fill(engine, self.schema, self.phrase_pairs(ood), progress=progress)
            self._owners[ood] = self._first_owners(ood)

    # -- corpus ---------------------------------------------------------------------------------
    def _stream(self, columns: Sequence[str]) -> Iterator[pa.Table]:
        """Only ``columns`` of the corpus, in corpus order, :data:`STREAM_ROWS` rows at a time."""
        for part in part_paths(self._ws, self.domain):
            for rb in pq.ParquetFile(part).iter_batches(batch_size=STREAM_ROWS, columns=list(columns)):
                yield pa.Table.from_batches([rb])

    def doc_id(self, i: int) -> str:
        """The id of document ``i`` of the corpus."""
        return self._ids[i]

    def rows(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        """Documents ``rows`` of the corpus as dicts, in order (fetched from the index in batches)."""
        return self.docs_by_id([self._ids[i] for i in rows])

    def row(self, i: int) -> dict[str, Any]:
        """Document ``i`` of the corpus as a dict."""
        return self.rows([i])[0]

    def docs_by_id(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The documents with these ids as dicts, in order; the index answers like the corpus files."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), FETCH_BATCH):
            chunk = wanted[start : start + FETCH_BATCH]
            for doc in self.engine.handle.fetch_docs(chunk, self.schema.columns):
                found[str(doc["id"])] = doc
        missing = [d for d in wanted if d not in found]
        if missing:
            raise BenchError(
                f"document {missing[0]} of the {self.domain} corpus is not in index {self.index_version}; "
                f"run: prore index build {self.domain}",
                code="bench_stale_index",
            )
        return [found[d] for d in ids]

    def row_by_id(self, doc_id: str) -> dict[str, Any]:
        """The document with id ``doc_id`` as a dict."""
        return self.docs_by_id([doc_id])[0]

    def _facts(self) -> DomainFacts:
        cats = CATEGORICAL[self.domain]
        has_category = "category" in self.schema.columns
        counts: dict[str, Counter[str]] = {name: Counter() for name in cats}
        pairs: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
        for batch in self._stream(cats):
            for name in cats:
                for item in pc.value_counts(batch.column(name)).to_pylist():
                    counts[name][str(item["values"])] += int(item["counts"])
            if has_category:
                for name in ("brand", "color"):
                    grouped = batch.group_by(["category", name]).aggregate([([], "count_all")])
                    for c, v, n in zip(
                        *(grouped.column(k).to_pylist() for k in ("category", name, "count_all")), strict=True
                    ):
                        pairs[str(c)][name][str(v)] += int(n)
        values = {name: _by_count(cnt) for name, cnt in counts.items()}
        by_category = {c: {n: _by_count(cnt) for n, cnt in d.items()} for c, d in pairs.items()}
        return DomainFacts(self.schema, values, by_category, self._sampled_facets(has_category))

    def _sampled_facets(self, has_category: bool) -> dict[str, tuple[str, ...]]:
        """Facets carried by every ``step``-th document (all of them in a corpus of at most :data:`FACET_SAMPLE`)."""
        step = max(1, self.corpus_rows // FACET_SAMPLE)
        names = list(self.schema.vector_fields)
        found: dict[str, Counter[str]] = defaultdict(Counter)
        first = 0  # corpus row of the batch's first row
        for batch in self._stream([*names, *(["category"] if has_category else [])]):
            offset = (-first) % step
            picked = batch.take(pa.array(range(offset, batch.num_rows, step), type=pa.int64()))
            cols = {name: picked.column(name).to_pylist() for name in picked.column_names}
            for j in range(picked.num_rows):
                cat = str(cols["category"][j]) if has_category else None
                for name in names:
                    found[name].update(set(self.book.carried(name, str(cols[name][j]), cat)))
            first += batch.num_rows
        return {name: _by_count(cnt) for name, cnt in found.items() if cnt}

    def phrase_pairs(self, ood: bool) -> list[tuple[str, str]]:
        """Every (field, phrase) a leaf of a split may search (``ood``: the OOD paraphrases)."""
        return [
            (name, phrase)
            for name, keys in self.facts.facets.items()
            for key in keys
            for phrase in self.book.paraphrases(key, ood)
        ]

    def _first_owners(self, ood: bool) -> frozenset[str]:
        """Ids ranked first for a phrase of a facet they carry: the only possible gold documents of
        a one-condition semantic query."""
        firsts = [
            (name, key, doc)
            for name, keys in self.facts.facets.items()
            for key in keys
            for phrase in self.book.paraphrases(key, ood)
            if (doc := self.ranks.first(name, phrase)) is not None
        ]
        docs = {str(d["id"]): d for d in self.docs_by_id(sorted({doc for _, _, doc in firsts}))}
        owners = set()
        for name, key, doc_id in firsts:
            row = docs[doc_id]
            cat = None if row.get("category") is None else str(row["category"])
            if key in self.book.carried(name, str(row[name]), cat):
                owners.add(doc_id)
        return frozenset(owners)

    def single_condition_pool(self, split: str) -> list[int]:
        """Gold rows of ``split`` that some one-condition semantic query can rank first."""
        owners = self._owners[split == "ood"]
        return [i for i in self._pools[split] if self._ids[i] in owners]

    # -- splits ---------------------------------------------------------------------------------
    def _make_pools(self) -> dict[str, list[int]]:
        order = list(range(self.corpus_rows))
        random.Random(f"{self.seed}:{self.domain}:pools").shuffle(order)
        sizes = self.sizes
        total = sum(sizes[s] for s in SPLITS)
        share = min(max((sizes["test"] + sizes["ood"]) / total, 0.15), 0.5)
        n_eval = round(self.corpus_rows * share)
        self.disjoint_gold = min(n_eval, self.corpus_rows - n_eval) >= MIN_POOL_DOCS
        if not self.disjoint_gold:
            return {s: order for s in SPLITS}
        return {"train": order[n_eval:], "test": order[:n_eval], "ood": order[:n_eval]}

    def gold_pool(self, split: str) -> list[int]:
        """Row numbers the gold documents of ``split`` are drawn from."""
        return self._pools[split]

    # -- checks ---------------------------------------------------------------------------------
    def leaks(self, nl: str, doc: Mapping[str, Any]) -> bool:
        """Whether ``nl`` copies a facet phrasing from the document's own text fields."""
        low = nl.lower()
        for name in self.schema.text_fields:
            for _, words in self.book.found(name, str(doc[name])):
                if words.lower() in low:
                    return True
        return False

    def super_counts(self, items: Sequence[tuple[Program, str]]) -> list[tuple[int, bool] | None]:
        """For each (program, gold id): how many documents pass its structure-only super-query, and
        whether the gold document is among them (``None`` for a program that does not validate or
        whose count fails). One ClickHouse scan counts :data:`SUPER_BATCH` programs."""
        from serving.dsl import DslError, strip_retrievals
        from serving.engine.count import count_many

        conditions: list[exp.Expression] = []
        counted: list[int] = []
        for j, (program, gold) in enumerate(items):
            try:
                # The engine caches what it validates here, so the rank filter does not redo it.
                validated = self.engine.prepare(program).validated
            except DslError:
                continue
            where = _where_of(strip_retrievals(validated, table=self.engine.handle.table))
            is_gold = exp.EQ(this=exp.column("id"), expression=exp.Literal.string(gold))
            conditions += [where, exp.And(this=exp.Paren(this=where.copy()), expression=is_gold)]
            counted.append(j)
        counts = count_many(self.engine, conditions, batch=2 * SUPER_BATCH)
        out: list[tuple[int, bool] | None] = [None] * len(items)
        for c, j in enumerate(counted):
            n, g = counts[2 * c], counts[2 * c + 1]
            if isinstance(n, int) and isinstance(g, int):
                out[j] = (n, g > 0)
        return out

    def close(self) -> None:
        if self.owns_engine:
            self.engine.close()


def _by_count(counts: Counter[str]) -> tuple[str, ...]:
    """Keys most frequent first, ties by key."""
    return tuple(k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _where_of(sql: str) -> exp.Expression:
    """The WHERE condition of a single-table ``SELECT`` as a tree (``TRUE`` when it has none)."""
    where = sqlglot.parse_one(sql, read="clickhouse").args.get("where")
    return exp.true() if where is None else where.this


def open_context(
    cfg: Config, domain: str, *, seed: int, sizes: Mapping[str, int], progress: bool = False
) -> BenchContext:
    """Open the engine on the published index of ``domain`` and read everything synthesis needs."""
    from serving.engine import Engine
    from serving.settings import ServingSettings

    engine = Engine.open(cfg, domain, caches=cfg.section(ServingSettings).engine)
    try:
        return BenchContext(cfg, domain, engine, seed=seed, sizes=sizes, progress=progress, owns_engine=True)
    except BaseException:
        engine.close()
        raise
