"""The ``human`` evaluation split: requests typed the way people type, judged by hand, never trained on.

The requests live in this package, one JSON object a line, ``ecommerce.jsonl`` (over ``products``) and
``email.jsonl`` (over ``emails``)::

    {"id": "ec-007", "nl": "sony or bose hdphones <$200 w/ good anc",
     "where": "brand IN ('Sony', 'Bose') AND category = 'headphones' AND price < 200",
     "must": ["headphones.noise_cancelling"], "must_not": [], "note": "optional free text"}

The judgement of a request is its ``where`` (a SQL condition over the corpus table, as a program's WHERE
is written; empty for none) plus facets:

- ``must``: every item must hold. An item is a *facet reference* or a list of them, of which at least
  one must hold (an "or" of facets).
- ``must_not``: no reference may hold.

A facet reference names a facet of the corpus's label table (:mod:`indexing.corpora.labels`): a
vocabulary facet key (``headphones.bass``, ``invoice.overdue``) or a visual key
(``visual:color=white``), either bare, meaning in any field the generators label it in
(:data:`LABELED_FIELDS`), or as ``<field>/<facet>`` for one field (``review/general.stopped_working``),
the label table's own ``<field>/<facet>`` key (:func:`rl.datasets.relevance.label_key`).

**The relevant set** of a request on a workspace is every document of the published index's corpus table
that satisfies the ``where`` and carries every ``must`` and none of the ``must_not`` facets by the corpus's
label table. It is computed at evaluation time, on the index's own ClickHouse store: the ``where`` is
validated as the WHERE of ``SELECT DISTINCT id FROM <table> WHERE ...`` by the program validator
(:func:`serving.dsl.validate`, the engine's program-safety checks), rendered from the validated tree,
and run read-only under the store's query limits, joined with the labels loaded into a table of the
benchmark's own (:class:`rl.datasets.relevance.RelevanceJudge`). A request whose relevant set is empty on
this corpus is skipped, and the count says so.

**The gold document** is a documented convention, not an answer: the first relevant id in id order.
Hit@1, Hit@3, MRR and NDCG@3 (found the gold) therefore mean nothing on this split; P@1 and nDCG@10
(satisfied the request) are the ones that count. The instance's ``program`` is the ``where`` alone
(``SELECT DISTINCT id FROM <table> WHERE ...``, no vector predicates): the ``sql-only`` method runs it;
the ``oracle`` method refuses this split, which has no gold program.

The split is small and hand-written: it measures how methods generalize to wording no generator
produced. It must never be trained or tuned on; nothing here is a :data:`rl.datasets.store.SPLITS` split,
so :func:`rl.datasets.store.load_split` (which training, prompts and the reward service read) never returns it.

>>> refs = resolve("ecommerce", "headphones.bass")
>>> refs
('description/headphones.bass', 'review/headphones.bass')
>>> resolve("ecommerce", "image/visual:color=white")
('image/visual:color=white',)
>>> level_of(3, has_or=False), level_of(1, has_or=False), level_of(2, has_or=True), level_of(4, has_or=False)
('L2', 'L1', 'L3', 'L3')
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from indexing.config import Config
from indexing.corpora.labels import visual_key
from indexing.corpora.vocab import facets, product_vocab
from indexing.errors import QueryRejected
from indexing.schema import CorpusSchema, schema_for
from rl.datasets.compile import literal
from rl.datasets.errors import BenchError
from rl.datasets.relevance import ALIAS, label_key
from rl.datasets.store import RELEVANT_CAP, Instance
from serving.dsl import DslError, Program, ValidatedProgram, strip_retrievals, validate

HUMAN_SPLIT = "human"
"""The split's name for ``prore eval --split``; never one of :data:`rl.datasets.store.SPLITS`."""
FAMILY = "human"
"""The ``family`` of every human instance."""
DATA_DIR = Path(__file__).parent
KEYS = ("id", "nl", "where", "must", "must_not", "note")
REQUIRED = ("id", "nl", "where", "must", "must_not")
LABELED_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "ecommerce": {"text": ("description", "review"), "image": ("image",)},
    "email": {"text": ("body",)},
}
"""Fields the corpus generators write label rows for, by kind of facet: vocabulary facets (``text``) and
visual terms (``image``). :mod:`indexing.corpora.products` labels the description's and the review's facets
and the image's visual terms; :mod:`indexing.corpora.emails` the body's facets."""
CLOCK_FUNCTIONS = frozenset({"now", "today", "yesterday"})
"""Refused in a ``where``: the relevant set must not move with the index's build time."""
GOLD_RULE = (
    "the first relevant id in id order (a convention: Hit@1-family metrics mean nothing on this split)"
)
HUMAN_NOTE = (
    "Human split: hand-written requests with hand-written judgements; the gold id is only the first relevant "
    "id in id order, so Hit@1, Hit@3, MRR and NDCG@3 mean nothing here: read P@1 and nDCG@10. The split is "
    "small and must not be tuned to."
)
"""What reports of this split print under their table."""


class HumanDataError(BenchError):
    """A line of a human data file is wrong: not JSON, a missing or unknown key, a facet the vocabulary
    does not have, a ``where`` the program validator refuses. The message names the file and line."""

    code = "human_data"


@dataclass(frozen=True)
class HumanRequest:
    """One line of a human data file, checked against the domain's schema and facet vocabulary."""

    id: str
    domain: str
    nl: str
    where: str
    """The SQL condition as written; empty for none."""
    must: tuple[tuple[str, ...], ...]
    """Groups of facet references; every group must have one that holds."""
    must_not: tuple[str, ...]
    note: str | None
    line: int
    """1-based line of the data file."""
    validated: ValidatedProgram | None = field(default=None, compare=False, repr=False)
    """The validated ``SELECT DISTINCT id FROM <table> WHERE <where>``, or ``None`` without a ``where``."""

    @property
    def where_tree(self) -> exp.Expr | None:
        """The validated WHERE condition (over the corpus table's name), or ``None`` for none."""
        if self.validated is None:
            return None
        node: exp.Expr = self.validated.tree.args["where"].this
        return node

    @property
    def program(self) -> str:
        """The request's program: the ``where`` alone, as program JSON (what ``sql-only`` runs)."""
        return json.dumps(
            {"sql": select_sql(schema_for(self.domain).table, self.where), "retrieval_list": []}
        )

    @property
    def modalities(self) -> tuple[str, ...]:
        """Sorted subset of structured / text / image the judgement touches."""
        refs = [r for group in self.must for r in group] + list(self.must_not)
        kinds = {"image" if facet_of(r).startswith("visual:") else "text" for r in refs}
        if self.where:
            kinds.add("structured")
        return tuple(sorted(kinds))

    @property
    def conditions(self) -> int:
        """How many leaf conditions the judgement has: WHERE predicates (an ``IN`` list is one, as in the
        benchmark's trees), every facet of every must group, every must-not facet."""
        return where_predicates(self.where_tree) + sum(len(g) for g in self.must) + len(self.must_not)

    @property
    def has_or(self) -> bool:
        """Whether the judgement has an ``OR``: in the WHERE, or a must group of several facets."""
        ors = self.where_tree is not None and any(isinstance(node, exp.Or) for node in self.where_tree.walk())
        return ors or any(len(g) > 1 for g in self.must)

    @property
    def level(self) -> str:
        return level_of(self.conditions, has_or=self.has_or)

    @property
    def operators(self) -> tuple[str, ...]:
        ops: set[str] = set()
        if self.where_tree is not None:
            for node in self.where_tree.walk():
                name = _OPERATORS.get(type(node))
                if name:
                    ops.add(name)
        if self.must:
            ops.add("must")
        if self.must_not:
            ops.add("must_not")
        return tuple(sorted(ops))

    def judgement(self) -> str:
        """The judgement as JSON (the instance's ``tree``)."""
        must: list[Any] = [list(g) if len(g) > 1 else g[0] for g in self.must]
        return json.dumps(
            {"where": self.where, "must": must, "must_not": list(self.must_not)}, ensure_ascii=False
        )


_OPERATORS: dict[type[exp.Expr], str] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.In: "IN",
    exp.Between: "BETWEEN", exp.Like: "LIKE", exp.ILike: "ILIKE", exp.Is: "IS", exp.And: "AND", exp.Or: "OR",
    exp.Not: "NOT",
}  # fmt: skip
_PREDICATES = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Is,
)


def where_predicates(tree: exp.Expr | None) -> int:
    """Leaf predicates of a WHERE condition: comparisons, ``IN``, ``BETWEEN``, ``LIKE`` and bare columns
    (a boolean column used as a condition); a predicate inside another one's subquery is not counted."""
    if tree is None:
        return 0
    if isinstance(tree, _PREDICATES):
        return 1
    if isinstance(tree, exp.Column):
        return 1
    if isinstance(tree, exp.Paren | exp.Not):
        return where_predicates(tree.this)
    if isinstance(tree, exp.And | exp.Or):
        return where_predicates(tree.this) + where_predicates(tree.expression)
    return 1


def level_of(conditions: int, *, has_or: bool) -> str:
    """The level of a judgement, as the benchmark's levels count leaf conditions: one is ``L1``; four or
    more, or an ``OR`` of two or more, is ``L3``; else ``L2``."""
    n = conditions
    if (has_or and n > 1) or n >= 4:
        return "L3"
    return "L1" if n <= 1 else "L2"


def select_sql(table: str, where: str) -> str:
    """``SELECT DISTINCT id FROM <table> [WHERE <where>]``."""
    return f"SELECT DISTINCT id FROM {table}" + (f" WHERE {where}" if where.strip() else "")


@cache
def facet_vocabulary(domain: str) -> Mapping[str, tuple[str, ...]]:
    """Every facet a request of ``domain`` may name, with the fields the generators label it in.

    >>> facet_vocabulary("email")["invoice.overdue"]
    ('body',)
    >>> facet_vocabulary("ecommerce")["visual:shape=over-ear"]
    ('image',)
    """
    fields = LABELED_FIELDS[schema_for(domain).domain]
    out: dict[str, tuple[str, ...]] = {key: fields["text"] for key in facets(domain)}
    if "image" in fields:
        pv = product_vocab()
        terms = [*pv.colors.values(), *pv.finishes, *pv.settings]
        terms += [t for c in pv.categories.values() for t in (*c.shapes, *c.materials)]
        for t in terms:
            out[visual_key(t.kind, t.value)] = fields["image"]
    return out


def facet_of(ref: str) -> str:
    """The facet a reference names, without its field."""
    return ref.split("/", 1)[1] if "/" in ref else ref


def resolve(domain: str, ref: str) -> tuple[str, ...]:
    """The label keys (``<field>/<facet>``) a facet reference stands for; :class:`HumanDataError` (code
    ``human_facet``) for a facet the vocabulary does not have or a field it is never labeled in."""
    vocab = facet_vocabulary(domain)
    fieldname, sep, facet = ref.partition("/")
    if not sep:
        fieldname, facet = "", ref
    fields = vocab.get(facet)
    if fields is None:
        raise HumanDataError(f"unknown {domain} facet {facet!r}", code="human_facet")
    if fieldname:
        if fieldname not in fields:
            raise HumanDataError(
                f"facet {facet!r} is labeled only in {', '.join(fields)}, not in {fieldname!r}",
                code="human_facet",
            )
        return (label_key(fieldname, facet),)
    return tuple(label_key(f, facet) for f in fields)


def check_where(where: str, schema: CorpusSchema) -> ValidatedProgram | None:
    """The validated program ``SELECT DISTINCT id FROM <table> WHERE <where>`` (``None`` when ``where`` is
    empty), checked as the WHERE of
    ``SELECT DISTINCT id FROM <table> WHERE ...`` by the program validator; :class:`HumanDataError` (code
    ``human_where``) with the validator's reason otherwise."""
    if not where.strip():
        return None
    try:
        validated = validate(Program(select_sql(schema.table, where), ()), schema)
    except DslError as exc:
        raise HumanDataError(f"where {where!r} is not a valid program condition: {exc.one_line()}",
                             code="human_where") from exc  # fmt: skip
    node = validated.tree.args.get("where")
    if node is None or validated.placeholders:
        raise HumanDataError(
            f"where {where!r} must be a plain condition (no vector placeholders)", code="human_where"
        )
    for call in node.find_all(exp.Anonymous):
        if str(call.name).lower() in CLOCK_FUNCTIONS:
            raise HumanDataError(
                f"where {where!r} calls {call.name}(): write dates as literals, so the relevant set does not move "
                "with the index's build time",
                code="human_where",
            )
    return validated


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise HumanDataError(f"{what} must be a list of non-empty strings", code="human_line")
    return list(value)


def parse_line(domain: str, text: str, line: int) -> HumanRequest:
    """One data line as a checked :class:`HumanRequest`; :class:`HumanDataError` naming what is wrong."""
    schema = schema_for(domain)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HumanDataError(
            f"not a JSON object: {exc.msg} (column {exc.colno})", code="human_line"
        ) from None
    if not isinstance(data, dict):
        raise HumanDataError("not a JSON object", code="human_line")
    missing = [k for k in REQUIRED if k not in data]
    unknown = sorted(set(data) - set(KEYS))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise HumanDataError(f"{'; '.join(parts)} (keys: {', '.join(KEYS)})", code="human_line")
    for key in ("id", "nl", "where"):
        if not isinstance(data[key], str):
            raise HumanDataError(f"{key} must be a string", code="human_line")
    if not data["id"].strip() or not data["nl"].strip():
        raise HumanDataError("id and nl must not be empty", code="human_line")
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise HumanDataError("note must be a string", code="human_line")
    if not isinstance(data["must"], list):
        raise HumanDataError("must must be a list of facets or of lists of facets", code="human_line")
    must = tuple(
        tuple(_strings(item, "a must group")) if isinstance(item, list) else tuple(_strings([item], "must"))
        for item in data["must"]
    )
    if any(not group for group in must):
        raise HumanDataError("a must group must name at least one facet", code="human_line")
    must_not = tuple(_strings(data["must_not"], "must_not"))
    for ref in [r for group in must for r in group] + list(must_not):
        resolve(domain, ref)
    validated = check_where(data["where"], schema)
    if validated is None and not must and not must_not:
        raise HumanDataError("the judgement is empty: give a where, must or must_not", code="human_line")
    return HumanRequest(
        id=data["id"].strip(), domain=domain, nl=data["nl"], where=data["where"].strip(), must=must,
        must_not=must_not, note=note, line=line, validated=validated,
    )  # fmt: skip


def data_path(domain: str) -> Path:
    """The packaged data file of ``domain``."""
    return DATA_DIR / f"{schema_for(domain).domain}.jsonl"


def read_requests(domain: str, path: Path | None = None) -> list[HumanRequest]:
    """Every request of the data file (the packaged one by default), checked; blank lines are skipped.

    A bad line raises :class:`HumanDataError` naming the file and line; so does an id used twice.
    """
    source = path or data_path(domain)
    if not source.is_file():
        raise HumanDataError(f"no human {domain} requests at {source}", code="human_data")
    out: list[HumanRequest] = []
    seen: dict[str, int] = {}
    for n, text in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            req = parse_line(domain, text, n)
        except HumanDataError as exc:
            raise HumanDataError(f"{source.name} line {n}: {exc.message}", code=exc.code) from None
        if req.id in seen:
            raise HumanDataError(f"{source.name} line {n}: id {req.id!r} is already on line {seen[req.id]}",
                                 code="human_duplicate")  # fmt: skip
        seen[req.id] = n
        out.append(req)
    if not out:
        raise HumanDataError(f"{source.name} holds no requests", code="human_data")
    return out


def data_fingerprint(domain: str, path: Path | None = None) -> str:
    """A hash of the data file (16 hex digits): runs compare only when their requests are the same."""
    return hashlib.sha256((path or data_path(domain)).read_bytes()).hexdigest()[:16]


def label_condition(domain: str, req: HumanRequest) -> list[str]:
    """The facet part of a request's condition: one ClickHouse condition per must group and must-not
    facet, over the label table joined as :data:`~rl.datasets.relevance.ALIAS`."""

    def any_of(refs: Sequence[str]) -> str:
        keys = [k for r in refs for k in resolve(domain, r)]
        return "(" + " OR ".join(f"has({ALIAS}.label_keys, {literal(k)})" for k in dict.fromkeys(keys)) + ")"

    return [any_of(g) for g in req.must] + [f"NOT {any_of([r])}" for r in req.must_not]


def condition(domain: str, req: HumanRequest, table: str | None = None) -> str:
    """The request's whole condition: its validated WHERE (its subqueries reading the physical ``table``,
    as substitution renders them) and its facets.

    >>> req = parse_line("ecommerce", '{"id": "x", "nl": "x", "where": "price < 200", '
    ...     '"must": ["review/headphones.bass"], "must_not": ["visual:color=white"]}', 1)
    >>> condition("ecommerce", req)
    "(price < 200) AND (has(bench_labels.label_keys, 'review/headphones.bass')) AND NOT (has(bench_labels.label_keys, 'image/visual:color=white'))"
    """
    parts = label_condition(domain, req)
    if req.validated is not None:
        rendered = sqlglot.parse_one(strip_retrievals(req.validated, table=table), read="clickhouse")
        parts.insert(0, f"({rendered.args['where'].this.sql(dialect='clickhouse', comments=False)})")
    return " AND ".join(parts) if parts else "TRUE"


@dataclass(frozen=True)
class Relevant:
    """A request's relevant set on one corpus: how many, and the first :data:`RELEVANT_CAP` ids in id order."""

    n: int
    ids: tuple[str, ...]


def relevance_statement(
    domain: str, requests: Sequence[HumanRequest], table: str, labels: str, cap: int
) -> str:
    """One scan answering ``requests``: ``countIf(c) AS n<j>, groupArraySortedIf(cap)(id, c) AS i<j>`` over the
    physical ``table`` (read as the corpus table's name) left-joined with the label table ``labels``."""
    alias = schema_for(domain).table
    columns = []
    for j, req in enumerate(requests):
        c = condition(domain, req, table)
        columns += [f"countIf({c}) AS n{j}", f"groupArraySortedIf({cap})({alias}.id, {c}) AS i{j}"]
    return (
        f"SELECT {', '.join(columns)} FROM {table} AS {alias} "
        f"LEFT JOIN {labels} AS {ALIAS} ON {alias}.id = {ALIAS}.doc_id"
    )


QueryFn = Callable[[str], list[tuple[Any, ...]]]


def relevant_sets(
    domain: str, requests: Sequence[HumanRequest], query: QueryFn, table: str, labels: str, *,
    cap: int = RELEVANT_CAP, batch: int = 64,
) -> list[Relevant]:  # fmt: skip
    """The relevant set of each request, in order, by ``query`` (a read-only store query): one scan per
    ``batch`` requests. A scan the store refuses is retried request by request, and the request the store
    refuses raises :class:`HumanDataError` (code ``human_where``) naming its line."""
    out: list[Relevant] = []
    for start in range(0, len(requests), max(batch, 1)):
        chunk = list(requests[start : start + batch])
        try:
            row = query(relevance_statement(domain, chunk, table, labels, cap))[0]
        except QueryRejected:
            if len(chunk) == 1:
                req = chunk[0]
                raise HumanDataError(f"{domain}.jsonl line {req.line} ({req.id}): the store refused its where "
                                     f"{req.where!r}", code="human_where") from None  # fmt: skip
            for req in chunk:
                out += relevant_sets(domain, [req], query, table, labels, cap=cap, batch=1)
            continue
        for j in range(len(chunk)):
            out.append(Relevant(n=int(row[2 * j]), ids=tuple(str(i) for i in row[2 * j + 1])))
    return out


def instance(req: HumanRequest, rel: Relevant) -> Instance:
    """The benchmark instance of a request with a non-empty relevant set (gold: its first relevant id)."""
    return Instance(
        qid=req.id,
        split=HUMAN_SPLIT,
        domain=req.domain,
        nl=req.nl,
        program=req.program,
        gold_id=rel.ids[0],
        level=req.level,
        modalities=req.modalities,
        family=FAMILY,
        operators=req.operators,
        tree=req.judgement(),
        relevant_n=rel.n,
        relevant_ids=rel.ids,
        relevant_capped=rel.n > len(rel.ids),
    )


@dataclass(frozen=True)
class HumanSplit:
    """The human split of one domain on one workspace's published index."""

    domain: str
    instances: tuple[Instance, ...]
    """The requests with a non-empty relevant set, in file order."""
    skipped: tuple[str, ...]
    """Ids of the requests whose relevant set is empty on this corpus."""
    identity: dict[str, Any]
    """What a run records as its benchmark (version ``human``, the data file's fingerprint, the index)."""

    @property
    def total(self) -> int:
        return len(self.instances) + len(self.skipped)

    def summary_line(self) -> str:
        """``human split: kept N of M ecommerce requests; skipped K with no relevant document here: ids``."""
        text = f"human split: kept {len(self.instances)} of {self.total} {self.domain} requests"
        if self.skipped:
            shown = ", ".join(self.skipped[:10]) + (
                f" and {len(self.skipped) - 10} more" if len(self.skipped) > 10 else ""
            )
            text += f"; skipped {len(self.skipped)} with no relevant document in this corpus: {shown}"
        return text


def load_human(cfg: Config, domain: str, *, path: Path | None = None) -> HumanSplit:
    """The human split of ``domain`` on the workspace of ``cfg``: every request of the data file judged on the
    published index's corpus (see the module docstring); requests with an empty relevant set are skipped and
    listed in :attr:`HumanSplit.skipped`.

    The corpus must be a generated one (with a label table) and the index must be built from it.
    """
    from indexing.corpora.files import corpus_manifest, read_labels
    from indexing.index import open_index
    from indexing.stores.clickhouse import QueryLimits
    from indexing.workspace import Workspace
    from rl.datasets.relevance import RelevanceJudge

    schema = schema_for(domain)
    requests = read_requests(schema.domain, path)
    ws = Workspace(cfg.workspace)
    manifest = corpus_manifest(ws, schema.domain)
    labels = read_labels(ws, schema.domain)
    if labels is None:
        raise BenchError(
            f"the {domain} corpus has no label table (it was loaded from real data), so the human split has no "
            "relevant sets; build a generated corpus: prore corpus build " + domain,
            code="no_labels",
        )
    handle = open_index(cfg, schema.domain)
    try:
        built_from = handle.meta.get("corpus_fingerprint")
        if built_from and built_from != manifest.get("fingerprint"):
            raise BenchError(
                f"the {domain} index was built from another corpus ({built_from}, workspace has "
                f"{manifest.get('fingerprint')}); run: prore index build {domain}",
                code="bench_stale_index",
            )
        limits = QueryLimits.from_config(cfg.clickhouse)

        def query(sql: str) -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = handle.sql.query(sql, settings=limits.settings())
            return rows

        with RelevanceJudge(handle.sql, handle.table, schema.table, labels) as judge:
            sets = relevant_sets(schema.domain, requests, query, handle.table, judge.name)
        identity = {
            "version": HUMAN_SPLIT,
            "fingerprint": data_fingerprint(schema.domain, path),
            "seed": None,
            "index_version": handle.version,
            "corpus_fingerprint": manifest.get("fingerprint"),
            "corpus_rows": handle.rows,
            "requests": len(requests),
            "gold_rule": GOLD_RULE,
        }
    finally:
        handle.close()
    kept = tuple(instance(r, s) for r, s in zip(requests, sets, strict=True) if s.n > 0)
    skipped = tuple(r.id for r, s in zip(requests, sets, strict=True) if s.n == 0)
    identity = {**identity, "kept": len(kept), "skipped": list(skipped)}
    return HumanSplit(schema.domain, kept, skipped, identity)
