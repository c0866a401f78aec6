"""Everything synthesis reads once per domain: the engine, the corpus, value and facet statistics,
the gold-width retrieval ranks of every query phrase, and the gold-document pools of the splits.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from tqdm import tqdm

from indexing.config import Config
from indexing.corpora.files import corpus_manifest, iter_corpus
from indexing.schema import CorpusSchema, schema_for
from indexing.workspace import Workspace
from rl.bench.compile import literal
from rl.bench.errors import BenchError
from rl.bench.leaves import CATEGORICAL, DomainFacts
from rl.bench.phrases import PhraseBook
from rl.bench.store import SPLITS
from serving.dsl.limits import DEFAULT_LIMITS
from serving.dsl.program import Program, Retrieval

if TYPE_CHECKING:
    from serving.engine import Engine

FACET_SAMPLE = 20_000
"""Documents scanned to learn which facets each field carries (all of them in a smaller corpus)."""
PROBE_BATCH = 512
"""Probe programs per ``execute_many`` call when ranking every query phrase."""
SUPER_BATCH = 128
"""Super-queries counted in one ClickHouse scan."""
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
        self, engine: Engine, schema: CorpusSchema, pairs: Iterable[tuple[str, str]], *, progress: bool = False
    ) -> None:
        """Rank the ``(field, phrase)`` pairs not seen yet, with one-entry probe programs."""
        todo = sorted({p for p in pairs if p not in self._ranks})
        bar = tqdm(total=len(todo), desc=f"{schema.domain} phrases", unit="q", disable=not progress)
        for start in range(0, len(todo), PROBE_BATCH):
            chunk = todo[start : start + PROBE_BATCH]
            programs = []
            for fieldname, phrase in chunk:
                kind = "image" if fieldname in schema.image_fields else "text"
                programs.append(
                    Program(
                        f"SELECT DISTINCT id FROM {schema.table} WHERE id IN <{kind}_1>",
                        (Retrieval(kind, fieldname, phrase, k=DEFAULT_LIMITS.default_k),),  # type: ignore[arg-type]
                    )
                )
            results = engine.execute_many(programs, k=1)
            for (fieldname, phrase), (prog, res) in zip(chunk, zip(programs, results, strict=True), strict=True):
                if isinstance(res, Exception):
                    raise BenchError(f"probing {fieldname} for {phrase!r} failed: {res}", code="bench_probe")
                ids = res.candidates[f"{prog.retrieval_list[0].type}_1"]
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
        self.table: pa.Table = pa.concat_tables(list(iter_corpus(ws, self.schema)))
        self.corpus_rows = self.table.num_rows
        if self.corpus_rows == 0:
            raise BenchError(f"the {domain} corpus is empty", code="bench_corpus")
        self._columns = {name: self.table.column(name) for name in self.table.column_names}
        self._index = {str(v): i for i, v in enumerate(self._columns["id"].to_pylist())}
        self.book = PhraseBook(domain)
        self.facts = self._facts()
        self.ranks = RankTable()
        self._pools = self._make_pools()
        self._owners: dict[bool, frozenset[int]] = {}
        for ood in (False, True):
            self.ranks.fill(engine, self.schema, self.phrase_pairs(ood), progress=progress)
            self._owners[ood] = self._first_owners(ood)

    # -- corpus ---------------------------------------------------------------------------------
    def row(self, i: int) -> dict[str, Any]:
        """Document ``i`` of the corpus as a dict."""
        return {name: col[i].as_py() for name, col in self._columns.items()}

    def row_by_id(self, doc_id: str) -> dict[str, Any]:
        """The document with id ``doc_id`` as a dict."""
        return self.row(self._index[doc_id])

    def _facts(self) -> DomainFacts:
        cats = CATEGORICAL[self.domain]
        values = {}
        for name in cats:
            counts = Counter(str(v) for v in self._columns[name].to_pylist())
            values[name] = tuple(v for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        by_category: dict[str, dict[str, tuple[str, ...]]] = {}
        if "category" in self._columns:
            pairs: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
            category = self._columns["category"].to_pylist()
            for name in ("brand", "color"):
                for c, v in zip(category, self._columns[name].to_pylist(), strict=True):
                    pairs[str(c)][name][str(v)] += 1
            by_category = {
                c: {n: tuple(v for v, _ in sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))) for n, cnt in d.items()}
                for c, d in pairs.items()
            }
        step = max(1, self.corpus_rows // FACET_SAMPLE)
        found: dict[str, Counter[str]] = defaultdict(Counter)
        category_col = self._columns.get("category")
        for i in range(0, self.corpus_rows, step):
            cat = None if category_col is None else str(category_col[i].as_py())
            for name in self.schema.vector_fields:
                found[name].update(set(self.book.carried(name, str(self._columns[name][i].as_py()), cat)))
        facets = {
            name: tuple(k for k, _ in sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0])))
            for name, cnt in found.items()
            if cnt
        }
        return DomainFacts(self.schema, values, by_category, facets)

    def phrase_pairs(self, ood: bool) -> list[tuple[str, str]]:
        """Every (field, phrase) a leaf of a split may search (``ood``: the OOD paraphrases)."""
        return [
            (name, phrase)
            for name, keys in self.facts.facets.items()
            for key in keys
            for phrase in self.book.paraphrases(key, ood)
        ]

    def _first_owners(self, ood: bool) -> frozenset[int]:
        """Rows ranked first for a phrase of a facet they carry: the only possible gold documents of
        a one-condition semantic query."""
        owners = set()
        category_col = self._columns.get("category")
        for name, keys in self.facts.facets.items():
            for key in keys:
                for phrase in self.book.paraphrases(key, ood):
                    doc = self.ranks.first(name, phrase)
                    if doc is None:
                        continue
                    i = self._index[doc]
                    cat = None if category_col is None else str(category_col[i].as_py())
                    if key in self.book.carried(name, str(self._columns[name][i].as_py()), cat):
                        owners.add(i)
        return frozenset(owners)

    def single_condition_pool(self, split: str) -> list[int]:
        """Gold rows of ``split`` that some one-condition semantic query can rank first."""
        owners = self._owners[split == "ood"]
        return [i for i in self._pools[split] if i in owners]

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
        whether the gold document is among them (``None`` for a program that does not validate).
        One ClickHouse scan counts :data:`SUPER_BATCH` programs."""
        from serving.dsl import DslError, strip_retrievals

        wheres: list[str | None] = []
        for program, _ in items:
            try:
                # The engine caches what it validates here, so the rank filter does not redo it.
                stripped = strip_retrievals(self.engine.prepare(program).validated)
            except DslError:
                wheres.append(None)
                continue
            wheres.append(_where_of(stripped, self.schema.table))
        out: list[tuple[int, bool] | None] = [None] * len(items)
        todo = [j for j, w in enumerate(wheres) if w is not None]
        for start in range(0, len(todo), SUPER_BATCH):
            chunk = todo[start : start + SUPER_BATCH]
            cols = []
            for j in chunk:
                cols.append(f"countIf({wheres[j]}) AS n{j}")
                cols.append(f"countIf(({wheres[j]}) AND id = {literal(items[j][1])}) AS g{j}")
            settings = self.engine.limits.settings(len(chunk))
            sql = f"SELECT {', '.join(cols)} FROM {self.engine.handle.table}"
            values = self.engine.handle.sql.query(sql, settings=settings)[0]
            for c, j in enumerate(chunk):
                out[j] = (int(values[2 * c]), int(values[2 * c + 1]) > 0)
        return out

    def close(self) -> None:
        if self.owns_engine:
            self.engine.close()


def _where_of(sql: str, table: str) -> str:
    """The WHERE condition of a single-table ``SELECT`` (``1`` when it has none)."""
    head = f"SELECT DISTINCT id FROM {table} WHERE "
    if sql.startswith(head) and " FROM " not in sql[len(head) :]:
        return sql[len(head) :]  # the compiled form: no need to parse it again
    where = sqlglot.parse_one(sql, read="clickhouse").args.get("where")
    return "1" if where is None else str(where.this.sql(dialect="clickhouse"))


def open_context(
    cfg: Config, domain: str, *, seed: int, sizes: Mapping[str, int], progress: bool = False
) -> BenchContext:
    """Open the engine on the published index of ``domain`` and read everything synthesis needs."""
    from serving.engine import Engine

    engine = Engine.open(cfg, domain)
    try:
        return BenchContext(cfg, domain, engine, seed=seed, sizes=sizes, progress=progress, owns_engine=True)
    except BaseException:
        engine.close()
        raise
