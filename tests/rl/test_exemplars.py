"""Exemplar retrieval (serving.exemplars) in training rows, in the planner card, in evaluation, and the
benchmark's honesty: nothing of the OOD split's wording reaches a training prompt or an exemplar."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from indexing.config import Config
from indexing.corpora.vocab import facets
from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets import load_split
from rl.datasets.store import Instance
from rl.datasets.verbalize import families
from rl.train.recombine import corpus_spans, recombine, recombined_rows
from rl.train.sft import SftJob, exemplar_index, instances, rows
from serving.exemplars import (
    EXEMPLARS_DIR,
    ExemplarError,
    ExemplarIndex,
    open_for_planner,
    program_shape,
    shots_for,
)
from tests.rl.train_support import DOMAINS, TINY


def _job(bench: Workspace, cfg: Config, out: Path, k: int = 3) -> SftJob:
    return SftJob(
        workspace=bench.root, domains=DOMAINS, out=out, profile="compact", exemplars=k, embedder=cfg.embedder
    )


def _shots(row: dict[str, object]) -> list[tuple[str, str]]:
    """The (request, program) exemplars of a chat: the user/assistant pairs between system and request."""
    msgs = row["prompt"]
    assert isinstance(msgs, list)
    middle = msgs[1:-1]
    assert [m["role"] for m in middle] == ["user", "assistant"] * (len(middle) // 2)
    return [(middle[i]["content"], middle[i + 1]["content"]) for i in range(0, len(middle), 2)]


class ExemplarRows(NamedTuple):
    """An SFT job with 3 exemplars a prompt, its exemplar index (closed), instances and rows."""

    job: SftJob
    exemplars: ExemplarIndex
    train: list[Instance]
    train_rows: list[dict[str, Any]]
    val_rows: list[dict[str, Any]]


@pytest.fixture(scope="module")
def exemplar_rows(
    train_bench: Workspace, small_index_cfg: Config, tmp_path_factory: pytest.TempPathFactory
) -> ExemplarRows:
    job = _job(train_bench, small_index_cfg, tmp_path_factory.mktemp("ex"))
    train, _ = instances(job)
    index = exemplar_index(job, train)
    assert index is not None
    try:
        train_rows, val_rows = rows(job, index)
    finally:
        index.close()
    return ExemplarRows(job, index, train, train_rows, val_rows)


@pytest.mark.slow
def test_every_training_prompt_gets_k_exemplars_of_its_domain_from_the_train_split_never_itself(
    exemplar_rows: ExemplarRows,
) -> None:
    _, _, train, train_rows, val_rows = exemplar_rows
    by_domain = {d: {(i.nl, i.program) for i in train if i.domain == d} for d in DOMAINS}
    for inst, row in zip(train, train_rows, strict=True):
        shots = _shots(row)
        assert len(shots) == 3
        assert all(s in by_domain[inst.domain] for s in shots), (
            "exemplars are train pairs of the row's own domain"
        )
        assert inst.nl not in {r for r, _ in shots}, "a request is never its own exemplar"
        assert len({p for _, p in shots}) == 3, "no exemplar program twice in one prompt"
    assert all(len(_shots(r)) == 3 for r in val_rows)


def test_exemplars_prefer_diverse_program_shapes(exemplar_rows: ExemplarRows) -> None:
    _, _, _, train_rows, _ = exemplar_rows
    distinct = [len({program_shape(p) for _, p in _shots(r)}) for r in train_rows]
    # 80 training requests per domain over a dozen shapes: almost every prompt finds three shapes.
    assert sum(d == 3 for d in distinct) / len(distinct) > 0.9


def test_nothing_of_the_ood_wording_reaches_a_training_prompt_or_an_exemplar(
    exemplar_rows: ExemplarRows, train_bench: Workspace, small_index_cfg: Config
) -> None:
    _, index, train, train_rows, val_rows = exemplar_rows
    texts = [m["content"] for r in train_rows + val_rows for m in r["prompt"] + r["completion"]]
    texts += [p.request for p in index.pairs] + [p.program for p in index.pairs]
    recombined = recombined_rows(Workspace(small_index_cfg.workspace), train, 2)
    assert recombined, "the benchmark has phrases to swap"
    texts += [t for _, nl, program in recombined for t in (nl, program)]
    blob = "\n".join(texts).lower()
    ood = {i.nl for d in DOMAINS for i in load_split(train_bench, d, "ood")}
    assert not [nl for nl in ood if nl.lower() in blob], "an OOD request appears in training"
    # The held-out families' own words: every frame fragment of three words or more.
    fragments = {f.strip(" -;:|").lower() for fam in families(ood=True) for frame in fam.frames
                 for f in re.split(r"\{\w+\}", frame) if len(f.split()) >= 3}  # fmt: skip
    assert fragments, "the OOD families have fragments to look for"
    assert not [f for f in fragments if f in blob]
    # The held-out paraphrases: those that no training paraphrase or document phrasing also contains.
    for domain in DOMAINS:
        book = facets(domain)
        seen = " | ".join(p.lower() for f in book.values() for p in (*f.query_train, *f.doc_phrasings))
        held = {p.lower() for f in book.values() for p in f.query_ood if p.lower() not in seen}
        leaked = [p for p in held if re.search(rf"\b{re.escape(p)}\b", blob)]
        assert not leaked, f"{domain}: OOD paraphrases in training: {leaked[:5]}"


def test_index_round_trips_through_a_model_directory_and_the_card_checks_its_version(
        exemplar_rows: ExemplarRows, small_index_cfg: Config, tmp_path: Path) -> None:  # fmt: skip
    _, index, train, _, _ = exemplar_rows
    index.save(tmp_path)
    again = ExemplarIndex.load(tmp_path, embedder=small_index_cfg.embedder)
    assert again.version == index.version and again.pairs == index.pairs
    request = next(i.nl for i in train if i.domain == "ecommerce")
    try:
        assert again.select("ecommerce", [request], k=2) == index.select("ecommerce", [request], k=2)
    finally:
        again.close()
        index.close()
    (tmp_path / "planner.json").write_text(json.dumps({"profile": "compact", "exemplars": index.card(2)}))
    opened = open_for_planner(tmp_path, small_index_cfg.embedder)
    assert opened is not None and opened[1] == 2
    assert len(shots_for(opened, "ecommerce", [request])[0]) == 2
    opened[0].close()
    (tmp_path / "planner.json").write_text(
        json.dumps({"profile": "compact", "exemplars": {**index.card(2), "version": "0" * 16}})
    )
    with pytest.raises(ExemplarError) as err:
        open_for_planner(tmp_path, small_index_cfg.embedder)
    assert err.value.code == "exemplar_version"
    (tmp_path / "planner.json").write_text(json.dumps({"profile": "compact", "exemplars": {"k": "three"}}))
    with pytest.raises(ExemplarError) as bad:
        open_for_planner(tmp_path, small_index_cfg.embedder)
    assert bad.value.code == "exemplar_card"
    (tmp_path / "planner.json").write_text(json.dumps({"profile": "compact"}))
    assert open_for_planner(tmp_path, small_index_cfg.embedder) is None


@pytest.mark.slow
def test_a_process_that_opened_a_planners_exemplars_removes_their_store_at_exit(
        exemplar_rows: ExemplarRows, small_index_cfg: Config, tmp_path: Path) -> None:  # fmt: skip
    """Evaluation, serving and RL open the planner's index through open_for_planner and never close it
    themselves: its process-private Milvus Lite store must still not outlive the process."""
    _, index, train, _, _ = exemplar_rows
    index.save(tmp_path)
    (tmp_path / "planner.json").write_text(json.dumps({"profile": "compact", "exemplars": index.card(2)}))
    request = next(i.nl for i in train if i.domain == "ecommerce")
    code = (
        "import dataclasses, json, sys\n"
        "from indexing.config import EmbedderConfig\n"
        "from serving.exemplars import open_for_planner, shots_for\n"
        "opened = open_for_planner(sys.argv[1], EmbedderConfig(**json.loads(sys.argv[2])))\n"
        "assert len(shots_for(opened, 'ecommerce', [sys.argv[3]])[0]) == 2\n"
        "print(opened[0]._tmp)\n"
    )
    embedder = json.dumps(dataclasses.asdict(small_index_cfg.embedder))
    got = subprocess.run([sys.executable, "-c", code, str(tmp_path), embedder, request],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    store = Path(got.stdout.strip().splitlines()[-1])
    assert store.name.startswith("prore-exemplars-") and not store.exists(), f"{store} outlived its process"


def test_shapes_mask_literals_and_keep_entries() -> None:
    a = json.dumps({"sql": "SELECT DISTINCT id FROM emails WHERE sender = 'a@b.com' AND toYear(date) = 2023 AND id IN <text_1>",
                    "retrieval_list": [{"type": "text", "field": "body", "query": "x"}]})  # fmt: skip
    b = a.replace("a@b.com", "it''s@c.org").replace("2023", "2021")
    assert program_shape(a) == program_shape(b)
    assert program_shape(a).endswith("| text:body") and "toYear" in program_shape(a)
    with pytest.raises(ExemplarError):
        program_shape("not json")


@pytest.mark.slow
def test_sft_with_exemplars_ships_its_index_and_the_planner_reads_it(train_bench: Workspace,
                                                                     small_index_cfg: Config, tmp_path: Path) -> None:  # fmt: skip
    from rl.eval.methods import MethodContext, get_method
    from rl.eval.runner import evaluate

    out = tmp_path / "sft"
    argv = ["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "2", "--limit", "30",
            "--exemplars", "2", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    card = json.loads((out / "final" / "planner.json").read_text())
    assert card["exemplars"]["k"] == 2 and card["exemplars"]["pairs"] == 60
    assert (out / "final" / EXEMPLARS_DIR / "pairs.parquet").is_file()
    test = load_split(train_bench, "ecommerce", "test")[:3]
    # One context for the run and the look inside: the engine the run loaded, with the exemplar index it read
    # (a second context would load vLLM a second time, about 30 s, to read the same card).
    ctx = MethodContext(small_index_cfg, "ecommerce")
    try:
        from rl.eval.planner_methods import LoadedPlanner, _vllm

        run = evaluate(small_index_cfg, "ecommerce", get_method(f"planner:{out / 'final'}"), test, progress=False,
                       ctx=ctx)  # fmt: skip
        assert len(run.results) == 3
        engines = [v for v in ctx.cache.values() if isinstance(v, LoadedPlanner)]
        loaded = _vllm(ctx, str(out / "final"))
        assert engines == [loaded], "the run's engine, not a second one"
        assert loaded.exemplars is not None and loaded.exemplars[1] == 2
    finally:
        ctx.close()


def test_recombination_swaps_a_said_phrase_in_request_and_program_alike(
    exemplar_rows: ExemplarRows, small_index_cfg: Config
) -> None:
    import random

    _, _, train, _, _ = exemplar_rows
    spans = corpus_spans(Workspace(small_index_cfg.workspace), "ecommerce")
    assert spans and all(1 <= len(s.split()) <= 4 for s in spans)
    inst = next(i for i in train if i.domain == "ecommerce" and any(
        e["query"] in i.nl for e in json.loads(i.program)["retrieval_list"]))  # fmt: skip
    got = recombine(inst, spans, random.Random(0))
    assert got is not None
    nl, program = got
    new = [e["query"] for e in json.loads(program)["retrieval_list"]]
    old = [e["query"] for e in json.loads(inst.program)["retrieval_list"]]
    assert new != old and all(q in nl for q in new), "every swapped phrase is said by the new request"
    assert json.loads(program)["sql"] == json.loads(inst.program)["sql"], "the program's logic is unchanged"
    assert all(q in spans for q, o in zip(new, old, strict=True) if q != o)
    unsaid = next(
        i for i in train if not any(e["query"] in i.nl for e in json.loads(i.program)["retrieval_list"])
    )
    assert recombine(unsaid, spans, random.Random(0)) is None
