"""Benchmark synthesis end to end on the small indexed corpora (real chDB, Milvus Lite and MiniLM)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexing.config import Config
from indexing.corpora.files import read_labels
from indexing.corpora.vocab import facets, find_facets
from indexing.schema import schema_for
from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets import Instance, SynthConfig, load_manifest, load_split, synthesize
from rl.datasets.compile import literal, predicate
from rl.datasets.context import BenchContext
from rl.datasets.noise import keeps_values
from rl.datasets.phrases import PhraseBook
from rl.datasets.store import RELEVANT_CAP, SPLITS, kept_under, planning_mismatch
from rl.datasets.structure import quotas
from rl.datasets.synth import _anchors, synthesize_domains
from rl.datasets.tree import And, Leaf, Node, Not, Or, signed_leaves
from rl.datasets.verbalize import families, family
from serving.dsl import parse_program, validate
from serving.dsl.program import Program, Retrieval
from serving.engine import Engine

SIZES = {"train": 30, "test": 10, "ood": 10}
DOMAINS = ("ecommerce", "email")


def _tree(data: dict[str, Any]) -> Node:
    if "and" in data:
        return And(tuple(_tree(c) for c in data["and"]))
    if "or" in data:
        return Or(tuple(_tree(c) for c in data["or"]))
    if "not" in data:
        return Not(_tree(data["not"]))
    return Leaf(
        data["leaf"],
        data["field"],
        data["op"],
        tuple(data["values"]),
        data.get("transform"),
        data.get("facet"),
    )


@pytest.fixture(scope="module")
def engines(small_index_cfg: Config) -> Iterator[dict[str, Engine]]:
    out = {d: Engine.open(small_index_cfg, d) for d in DOMAINS}
    yield out
    for e in out.values():
        e.close()


def _opener(engine: Engine) -> Any:
    return lambda cfg, domain, scfg: BenchContext(
        cfg, domain, engine, seed=scfg.seed, sizes=scfg.sizes, progress=scfg.progress
    )


@pytest.fixture(scope="module")
def bench(
    small_index_cfg: Config, engines: dict[str, Engine], tmp_path_factory: pytest.TempPathFactory
) -> Workspace:
    """Both domains synthesized once into their own workspace."""
    ws = Workspace(tmp_path_factory.mktemp("bench"))
    for d in DOMAINS:
        synthesize(small_index_cfg, d, SynthConfig(sizes=SIZES, seed=7, progress=False), out=ws,
                   opener=_opener(engines[d]))  # fmt: skip
    return ws


def _all(ws: Workspace, domain: str) -> list[Instance]:
    return [i for s in SPLITS for i in load_split(ws, domain, s)]


def test_domains_synthesized_side_by_side_equal_each_alone(
    small_index_cfg: Config, engines: dict[str, Engine], bench: Workspace, tmp_path: Path
) -> None:
    """``prore bench synth ecommerce email``: one thread per domain in one process writes each domain's
    benchmark exactly as a run of its own does (the ``bench`` fixture's, one domain after the other)."""
    ws = Workspace(tmp_path)
    manifests = synthesize_domains(small_index_cfg, DOMAINS, SynthConfig(sizes=SIZES, seed=7, progress=False),
                                   out=ws, opener=lambda cfg, d, scfg: _opener(engines[d])(cfg, d, scfg))  # fmt: skip
    assert [m["sizes"] for m in manifests] == [SIZES] * len(DOMAINS)
    for domain in DOMAINS:
        assert _all(ws, domain) == _all(bench, domain), domain


@pytest.mark.parametrize("domain", DOMAINS)
def test_splits_have_their_sizes_and_level_mix(bench: Workspace, domain: str) -> None:
    manifest = load_manifest(bench, domain)
    assert manifest["splits"] == SIZES and manifest["seed"] == 7
    assert manifest["corpus_fingerprint"] and manifest["index_version"]
    for split, size in SIZES.items():
        items = load_split(bench, domain, split)
        levels = {lvl: sum(i.level == lvl for i in items) for lvl in ("L1", "L2", "L3")}
        assert levels == {f"L{k}": v for k, v in quotas(size).items()}
        assert len({i.qid for i in items}) == size and all(i.split == split for i in items)
        for inst in items:
            n_leaves = sum(1 for _ in signed_leaves(_tree(json.loads(inst.tree))))
            assert n_leaves in {"L1": (1,), "L2": (2, 3), "L3": (4, 5)}[inst.level]
            assert list(inst.modalities) == sorted(inst.modalities)


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_gold_program_validates_and_ranks_its_gold_first(
    bench: Workspace, engines: dict[str, Engine], domain: str
) -> None:
    items = _all(bench, domain)
    schema = schema_for(domain)
    for inst in items:
        validate(parse_program(inst.program), schema)
    results = engines[domain].execute_many([parse_program(i.program) for i in items], k=5)
    for inst, res in zip(items, results, strict=True):
        assert not isinstance(res, Exception), (inst.qid, res)
        assert res.ids[0] == inst.gold_id, (inst.qid, inst.program, res.ids)


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_same_seed_gives_the_same_benchmark(
    small_index_cfg: Config, engines: dict[str, Engine], tmp_path: Path, domain: str
) -> None:
    sizes = {"train": 8, "test": 4, "ood": 4}
    runs = []
    for n, seed in enumerate((3, 3, 4)):
        ws = Workspace(tmp_path / str(n))
        synthesize(small_index_cfg, domain, SynthConfig(sizes=sizes, seed=seed, progress=False), out=ws,
                   opener=_opener(engines[domain]))  # fmt: skip
        runs.append(_all(ws, domain))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("domain", DOMAINS)
def test_ood_uses_held_out_families_and_paraphrases(bench: Workspace, domain: str) -> None:
    book = PhraseBook(domain)
    train_families = {f.name for f in families(ood=False)}
    for split in SPLITS:
        ood = split == "ood"
        for inst in load_split(bench, domain, split):
            assert (inst.family in train_families) != ood
            extractive = family(inst.family).extractive
            assert not (ood and extractive)
            for leaf, _ in signed_leaves(_tree(json.loads(inst.tree))):
                if leaf.semantic:
                    assert leaf.facet is not None
                    if extractive:  # the document's own words, as an extractive rewrite says them
                        assert leaf.phrase in book.doc_phrasings(leaf.facet)
                        continue
                    assert leaf.phrase in book.paraphrases(leaf.facet, ood)
                    assert leaf.phrase not in book.paraphrases(leaf.facet, not ood)
    every_train = {p for f in facets(domain).values() for p in f.query_train}
    every_ood = {p for f in facets(domain).values() for p in f.query_ood}
    assert not every_train & every_ood


def _docs(engine: Engine, ids: list[str]) -> dict[str, dict[str, Any]]:
    fields = engine.schema.columns
    return {d["id"]: d for d in engine.handle.fetch_docs(sorted(set(ids)), fields)}


@pytest.mark.parametrize("domain", DOMAINS)
def test_paraphrasing_requests_never_copy_the_gold_documents_words(
    bench: Workspace, engines: dict[str, Engine], domain: str
) -> None:
    items = [i for i in _all(bench, domain) if not family(i.family).extractive]
    docs = _docs(engines[domain], [i.gold_id for i in items])
    schema = schema_for(domain)
    checked = 0
    for inst in items:
        doc = docs[inst.gold_id]
        for name in schema.text_fields:
            for _, words in find_facets(domain, str(doc[name])):
                assert words.lower() not in inst.nl.lower(), (inst.qid, words)
                checked += 1
        for leaf, _ in signed_leaves(_tree(json.loads(inst.tree))):
            if leaf.semantic:
                assert leaf.phrase.lower() not in str(doc[leaf.field]).lower()
    assert checked > 0


@pytest.mark.parametrize("domain", DOMAINS)
def test_negated_leaves_are_false_and_plain_leaves_true_for_the_gold(
    bench: Workspace, engines: dict[str, Engine], domain: str
) -> None:
    engine = engines[domain]
    items = _all(bench, domain)
    docs = _docs(engine, [i.gold_id for i in items])
    book = PhraseBook(domain)
    checks: list[tuple[str, bool]] = []  # (SQL condition for the gold, expected truth)
    probes: list[tuple[Leaf, str, bool]] = []
    negated_seen = 0
    for inst in items:
        tree = _tree(json.loads(inst.tree))
        top = tree.children if isinstance(tree, And) else (tree,)
        plain = {id(n) for n in top if isinstance(n, Leaf)}
        for leaf, negated in signed_leaves(tree):
            if not negated and id(leaf) not in plain:
                continue  # an OR alternative may be either
            negated_seen += negated
            gold = literal(inst.gold_id)
            if leaf.semantic:
                probes.append((leaf, inst.gold_id, not negated))
                if negated:
                    doc = docs[inst.gold_id]
                    category = doc.get("category")
                    text = str(doc[leaf.field])
                    assert leaf.facet not in book.carried(leaf.field, text, category), inst.qid
            else:
                checks.append((f"id = {gold} AND ({predicate(leaf)})", not negated))
    assert negated_seen > 0 and checks
    table = engine.handle.table
    cols = ", ".join(f"countIf({cond}) AS c{j}" for j, (cond, _) in enumerate(checks))
    row = engine.handle.sql.query(f"SELECT {cols} FROM {table}")[0]
    for (cond, truth), n in zip(checks, row, strict=True):
        assert (int(n) == 1) == truth, cond
    programs = [
        Program(
            f"SELECT DISTINCT id FROM {engine.schema.table} WHERE id IN <{leaf.modality}_1>",
            (Retrieval(leaf.modality, leaf.field, leaf.phrase),),  # type: ignore[arg-type]
        )
        for leaf, _, _ in probes
    ]
    for (leaf, gold_id, truth), res in zip(probes, engine.execute_many(programs), strict=True):
        assert not isinstance(res, Exception)
        assert (gold_id in res.candidates[f"{leaf.modality}_1"]) == truth, (leaf, gold_id)


@pytest.mark.parametrize("domain", DOMAINS)
def test_evaluation_gold_documents_differ_from_training(bench: Workspace, domain: str) -> None:
    manifest = load_manifest(bench, domain)
    assert manifest["disjoint_gold"]  # 600 documents are enough to keep the pools apart
    train = {i.gold_id for i in load_split(bench, domain, "train")}
    for split in ("test", "ood"):
        assert not train & {i.gold_id for i in load_split(bench, domain, split)}


def test_show_prints_statistics_and_examples(bench: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--workspace", str(bench.root), "bench", "show", "ecommerce", "--split", "test", "--n", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    first = load_split(bench, "ecommerce", "test")[0]
    for part in ("levels:", "modalities:", "operators", "template families:", "examples:", first.nl):
        assert part in out


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["bench", "synth", "books"], "corpus"),
        (["bench", "synth", "email", "--train", "0"], "bench_size"),
        (["bench", "synth", "email", "--ood", "-3"], "bench_size"),
        (["bench", "synth", "ecommerce", "--test", "5"], "no_index"),
        (["bench", "show", "email"], "no_bench"),
        (["bench", "show", "email", "--split", "dev"], "bench_split"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: str
) -> None:
    rc = main(["--workspace", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith(f"error {code}:") and "\n" not in err
    assert not (tmp_path / "bench" / "ecommerce").exists()


def test_rewrites_come_from_the_cache_and_keep_every_value(
    small_index_cfg: Config, engines: dict[str, Engine], tmp_path: Path
) -> None:
    from rl.datasets.rewriter import RewriterConfig, build_request, cache_key

    sizes = {"train": 4, "test": 2, "ood": 2}
    plain_ws, ws = Workspace(tmp_path / "plain"), Workspace(tmp_path / "rewritten")
    synthesize(small_index_cfg, "email", SynthConfig(sizes=sizes, seed=5, progress=False), out=plain_ws,
               opener=_opener(engines["email"]))  # fmt: skip
    plain = _all(plain_ws, "email")
    # A closed local port: every rewrite must come from the cache, none from a request.
    rcfg = RewriterConfig(url="http://127.0.0.1:9/v1", model="cached", timeout_s=0.5)
    for n, inst in enumerate(plain):
        key = cache_key(rcfg.model, build_request(rcfg, inst.nl)["messages"])
        path = ws.cache_dir / "rewriter" / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # The first rewrite drops every value; it must not be kept.
        content = "something vague" if n == 0 else f"Please find: {inst.nl}"
        path.write_text(json.dumps({"content": content}))
    synthesize(small_index_cfg, "email", SynthConfig(sizes=sizes, seed=5, progress=False, rewriter=rcfg), out=ws,
               opener=_opener(engines["email"]))  # fmt: skip
    rewritten = _all(ws, "email")
    assert [i.program for i in rewritten] == [i.program for i in plain]
    anchored = any(
        not leaf.semantic and isinstance(leaf.values[0], str) and not leaf.transform
        for leaf, _ in signed_leaves(_tree(json.loads(plain[0].tree)))
    )
    assert rewritten[0].rewritten is not anchored
    for before, after in list(zip(plain, rewritten, strict=True))[1:]:
        assert after.rewritten and after.nl == f"Please find: {before.nl}"
    assert load_manifest(ws, "email")["rewriter"]["sent"] == 0


@pytest.mark.parametrize("domain", DOMAINS)
def test_streamed_statistics_and_fetched_documents_equal_the_whole_corpus(
    small_index_cfg: Config, engines: dict[str, Engine], domain: str
) -> None:
    import pyarrow as pa

    from indexing.corpora.files import iter_corpus
    from rl.datasets.leaves import CATEGORICAL

    ctx = BenchContext(small_index_cfg, domain, engines[domain], seed=1, sizes=SIZES)
    table = pa.concat_tables(list(iter_corpus(Workspace(small_index_cfg.workspace), schema_for(domain))))
    assert ctx.corpus_rows == table.num_rows
    rows = [0, 1, 17, table.num_rows - 1]
    assert ctx.rows(rows) == [{k: table.column(k)[i].as_py() for k in table.column_names} for i in rows]
    for name in CATEGORICAL[domain]:
        counts: dict[str, int] = {}
        for v in table.column(name).to_pylist():
            counts[str(v)] = counts.get(str(v), 0) + 1
        assert ctx.facts.values[name] == tuple(sorted(counts, key=lambda v: (-counts[v], v)))
    book = PhraseBook(domain)
    carried: set[str] = set()
    for i in range(table.num_rows):
        cat = table.column("category")[i].as_py() if "category" in table.column_names else None
        for name in ctx.schema.vector_fields:
            carried |= set(book.carried(name, str(table.column(name)[i].as_py()), cat))
    assert {f for fs in ctx.facts.facets.values() for f in fs} == carried
    if domain == "ecommerce":
        brands = [b for c, b in zip(table.column("category").to_pylist(), table.column("brand").to_pylist(), strict=True)
                if c == "headphones"]  # fmt: skip
        assert set(ctx.facts.by_category["headphones"]["brand"]) == set(brands)


@pytest.mark.parametrize("domain", DOMAINS)
def test_super_counts_are_the_counts_of_the_structure_only_query(
    bench: Workspace, small_index_cfg: Config, engines: dict[str, Engine], domain: str
) -> None:
    from serving.dsl import strip_retrievals

    engine = engines[domain]
    ctx = BenchContext(small_index_cfg, domain, engine, seed=1, sizes=SIZES)
    items = load_split(bench, domain, "test")
    other = items[1].gold_id
    bad = Program(f"SELECT id FROM {engine.schema.table} WHERE nope = 1", ())
    pairs = [(parse_program(i.program), i.gold_id) for i in items] + [
        (parse_program(items[0].program), other),
        (bad, "x"),
    ]
    got = ctx.super_counts(pairs)
    assert got[-1] is None
    for (program, gold), count in zip(pairs[:-1], got[:-1], strict=True):
        stripped = strip_retrievals(validate(program, engine.schema), table=engine.handle.table)
        ids = {str(r[0]) for r in engine.handle.sql.query(stripped)}
        assert count == (len(ids), gold in ids)
    assert got[0] is not None and got[0][1]  # the gold passes its own super-query


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_gold_is_in_its_relevant_set_on_every_instance_of_every_split(
    bench: Workspace, domain: str
) -> None:
    for split in SPLITS:
        for inst in load_split(bench, domain, split):
            assert inst.relevant_n is not None and inst.relevant_n >= 1, inst.qid
            assert inst.gold_id in inst.relevant_ids, inst.qid
            assert list(inst.relevant_ids) == sorted(set(inst.relevant_ids))
            assert len(inst.relevant_ids) == min(inst.relevant_n, RELEVANT_CAP)
            assert inst.relevant_capped == (inst.relevant_n > RELEVANT_CAP)


@pytest.mark.parametrize("domain", DOMAINS)
def test_relevant_sets_equal_the_tree_evaluated_document_by_document(
    bench: Workspace, small_index_cfg: Config, engines: dict[str, Engine], domain: str
) -> None:
    """Every document checked one by one against the whole tree: structured leaves through their SQL on
    the corpus table, semantic leaves by the label table, AND / OR / NOT as sets."""
    engine = engines[domain]
    labels = read_labels(Workspace(small_index_cfg.workspace), domain)
    assert labels is not None
    carried: dict[tuple[str, str], set[str]] = {}
    for row in labels.to_pylist():
        carried.setdefault((row["field"], row["facet"]), set()).add(row["doc_id"])
    every = {str(r[0]) for r in engine.handle.sql.query(f"SELECT id FROM {engine.handle.table}")}

    def docs(node: Node) -> set[str]:
        if isinstance(node, Leaf):
            if node.semantic:
                return carried.get((node.field, str(node.facet)), set()) & every
            rows = engine.handle.sql.query(f"SELECT id FROM {engine.handle.table} WHERE {predicate(node)}")
            return {str(r[0]) for r in rows}
        if isinstance(node, Not):
            return every - docs(node.child)
        parts = [docs(c) for c in node.children]
        return set.intersection(*parts) if isinstance(node, And) else set.union(*parts)

    items = _all(bench, domain)
    sizes = set()
    for inst in items:
        want = docs(_tree(json.loads(inst.tree)))
        assert inst.relevant_n == len(want), inst.qid
        assert set(inst.relevant_ids) == want, inst.qid
        sizes.add(len(want))
    assert len(sizes) > 3  # broad and narrow requests alike


@pytest.mark.parametrize("domain", DOMAINS)
def test_manifest_reports_wording_and_relevant_sets_and_dates_stay_in_the_corpus(
    bench: Workspace, domain: str
) -> None:
    import datetime as dt

    manifest = load_manifest(bench, domain)
    for split, size in SIZES.items():
        assert manifest["distinct_nl"][split] == size
        assert 0 < manifest["distinct_programs"][split] <= size
        assert 0.0 <= manifest["noisy_share"][split] <= 1.0
    assert manifest["extractive_share"]["ood"] == 0.0 and manifest["extractive_share"]["train"] > 0
    rel = manifest["relevance"]
    assert rel["available"] and rel["cap"] == RELEVANT_CAP
    assert sum(st["n"] for st in rel["sizes"]["test"].values()) == SIZES["test"]
    first, last = (dt.date.fromisoformat(d) for d in next(iter(manifest["dates"].values())))
    name = next(iter(manifest["dates"]))
    for inst in _all(bench, domain):
        for leaf, _ in signed_leaves(_tree(json.loads(inst.tree))):
            if leaf.field == name and leaf.transform == "year":
                assert all(first.year <= int(v) <= last.year for v in leaf.values), inst.qid
            elif leaf.field == name:
                assert all(first <= dt.date.fromisoformat(str(v)) <= last for v in leaf.values), inst.qid


def test_noisy_wording_reaches_a_share_of_the_requests_and_keeps_every_value(
    small_index_cfg: Config, engines: dict[str, Engine], tmp_path: Path
) -> None:
    ws = Workspace(tmp_path)
    scfg = SynthConfig(sizes={"train": 12, "test": 6, "ood": 6}, seed=5, progress=False, noisy_share=0.5)
    manifest = synthesize(small_index_cfg, "ecommerce", scfg, out=ws, opener=_opener(engines["ecommerce"]))
    items = _all(ws, "ecommerce")
    noisy = [i for i in items if i.noisy]
    assert noisy and len(noisy) < len(items)
    assert manifest["noisy_share"]["train"] == round(
        sum(i.noisy for i in load_split(ws, "ecommerce", "train")) / 12, 4
    )
    for inst in noisy:
        tree = _tree(json.loads(inst.tree))
        assert keeps_values(inst.nl, _anchors(tree)), inst.nl
        for leaf, _ in signed_leaves(tree):
            for v in leaf.values:
                if isinstance(v, int | float) and not isinstance(v, bool):
                    assert f"{v:g}".rstrip("0").rstrip(".") in inst.nl.replace(",", ""), (inst.nl, v)


def test_bench_show_reports_relevant_set_sizes_per_level(
    bench: Workspace, capsys: pytest.CaptureFixture[str], small_index_cfg: Config
) -> None:
    assert main(["--workspace", str(bench.root), "bench", "show", "ecommerce", "--n", "1"]) == 0
    out = capsys.readouterr().out
    assert "relevant-set sizes" in out and "noisy wording" in out and "distinct programs" in out
    manifest = load_manifest(bench, "ecommerce")
    for split, size in SIZES.items():  # every split's distinct requests and programs, from the manifest
        n_nl, n_prog = manifest["distinct_nl"][split], manifest["distinct_programs"][split]
        assert f"  {split:<5} {size:>8}  {n_nl} ({n_nl / size:.1%})" in out
        assert f"{n_prog} ({n_prog / size:.1%})" in out
    assert any(line.strip().startswith("L1 ") for line in out.splitlines())


def test_a_benchmark_records_the_planning_it_was_kept_under(bench: Workspace) -> None:
    """The manifest names the engine's planning; an engine of another planning is told apart, and a manifest
    written before the record counts as fixed K's, the only engine then."""
    from serving.settings import PlanningOptions

    manifest = load_manifest(bench, "ecommerce")
    default = dataclasses.asdict(PlanningOptions())
    assert manifest["planning"] == default and kept_under(manifest) == default
    assert planning_mismatch(manifest, default) is None
    paper = dataclasses.asdict(PlanningOptions.fixed_k())
    note = planning_mismatch(manifest, paper)
    assert note is not None and "pushdown True -> False" in note and "conditional True -> False" in note
    legacy = {k: v for k, v in manifest.items() if k != "planning"}
    assert kept_under(legacy)["mode"] == "fixed-k" and planning_mismatch(legacy, paper) is None
    assert "conditional False -> True" in (planning_mismatch(legacy, default) or "")
    # a head read as a share of a corpus at least the benchmark's own widens nothing on it: the same engine there
    rows = manifest["corpus_rows"]
    assert default["chain_head_docs"] >= rows  # the default widens no head on a benchmark this small
    off = dataclasses.asdict(PlanningOptions(chain_head_docs=0))
    assert planning_mismatch(manifest, off) is None
    narrower = dataclasses.asdict(PlanningOptions(chain_head_docs=rows // 2))
    assert f"chain_head_docs 0 -> {rows // 2}" in (planning_mismatch(manifest, narrower) or "")
    capped = dataclasses.asdict(PlanningOptions(chain_head_docs=rows // 2, chain_head_max=0))
    assert planning_mismatch(manifest, capped) is None
    # a manifest written before the head widths were recorded had none
    older = {**manifest, "planning": {k: v for k, v in default.items() if not k.startswith("chain_head")}}
    assert planning_mismatch(older, default) is None


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_benchmark_synthesized_under_every_planning_pass_is_answered_by_its_gold_programs(
    small_index_cfg: Config, tmp_path: Path, domain: str
) -> None:
    """The oracle's promise holds for any engine the benchmark is synthesized under: with conditional
    conjunctions (chains within disjuncts and tapered chains too), filter pushdown and adaptive K all on, every
    gold program still ranks its gold first."""
    from serving.settings import PlanningOptions, ServingSettings

    planning = PlanningOptions(
        conditional=True, pushdown=True, adaptive_k=True, conditional_branches=True, chain_taper=True
    )
    cfg = small_index_cfg.with_section(
        dataclasses.replace(small_index_cfg.section(ServingSettings), planning=planning)
    )
    with Engine.open(cfg, domain) as engine:
        assert engine.planning == planning
        ws = Workspace(tmp_path / "bench")
        synthesize(cfg, domain, SynthConfig(sizes={"train": 8, "test": 12, "ood": 4}, seed=11, progress=False), out=ws,
                   opener=_opener(engine))  # fmt: skip
        items = _all(ws, domain)
        results = engine.execute_many([parse_program(i.program) for i in items], k=5)
    assert items and all(
        not isinstance(r, Exception) and r.ids[0] == i.gold_id for i, r in zip(items, results, strict=True)
    )
