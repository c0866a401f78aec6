"""The planner as an evaluation method: a tiny checkpoint through vLLM offline (free and schema-constrained
decoding), and the few-shot baseline against a real vLLM OpenAI-compatible server on loopback (the session's
``vllm_server``, tests/conftest.py, which the serving tests share)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence, Sized
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace
from rl.datasets import load_split
from rl.errors import TrainError
from rl.eval.guided import Completion, Decoding, execute, guided_run, parse_decoding, vote
from rl.eval.methods import MethodContext, Outcome, get_method
from rl.eval.planner_methods import (
    N_SHOTS,
    SHOTS_KEY,
    LoadedPlanner,
    column_values,
    few_shot_messages,
    generate,
    pick_exemplars,
    planner_completions,
    program_grammar,
)
from rl.eval.report import FAILURES, failure_breakdown
from rl.eval.runner import QueryResult, evaluate, modality_group
from rl.reward import parse_completion
from serving.dsl.grounding import Grounding
from serving.dsl.structured import STRUCTURED_LIMITS
from serving.engine.results import fuse
from serving.familiarity import Familiarity
from serving.prompt import CARD
from tests.rl.eval_support import Inst
from tests.rl.train_support import train_tiny_sft
from tests.serving.planner_support import PLANNER_NAME

TINY_PLANNER_GROUP = pytest.mark.xdist_group("tiny-planner")
"""The tests that decode with :func:`tiny_planner` run on one pytest-xdist worker: it is trained once, and
the two that decode in this process share :func:`planner_ctx`'s engines."""


@pytest.fixture(scope="session")
def tiny_planner(train_bench: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 40 steps, not 3: a model that already writes program-shaped text ends its completions and keeps the
    # program grammar's Earley parser small; the untrained one made this file's tests 2 minutes slower
    # (test_planner_method_generates_executes_and_scores: 188 s against 76 s), and still fails on some requests.
    return train_tiny_sft(train_bench, tmp_path_factory.mktemp("planner") / "sft", 40)


@pytest.fixture(scope="module")
def planner_ctx(small_index_cfg: Config) -> Iterator[MethodContext]:
    """One evaluation context for the tests that decode in this process: vLLM's engines (one per
    structured-output backend) load once for all of them. Closing it stops every engine core."""
    ctx = MethodContext(small_index_cfg, "ecommerce")
    try:
        yield ctx
        loaded = [v for v in ctx.cache.values() if isinstance(v, LoadedPlanner)]
        cores = [p.llm.llm_engine.engine_core.resources.engine_manager.processes[0] for p in loaded]
    finally:
        ctx.close()
    for core in cores:
        core.join(timeout=60)
        assert not core.is_alive(), "closing the context stops vLLM's engine core"


def _check_run(results: Sequence[QueryResult], instances: Sized) -> None:
    assert len(results) == len(instances)
    counts = failure_breakdown(results)
    errors = [r.error for r in results if r.error is not None]
    assert all(e.split(" ", 1)[0] in FAILURES for e in errors), errors
    assert counts["format"] + counts["validation"] + counts["execution"] == len(errors)
    assert sum(r.scores["exec"] for r in results) == len(results) - len(errors)


@TINY_PLANNER_GROUP
@pytest.mark.slow
def test_planner_method_generates_executes_and_scores(small_index_cfg: Config, train_bench: Workspace,
                                                       tiny_planner: Path,
                                                       planner_ctx: MethodContext) -> None:  # fmt: skip
    instances = list(load_split(train_bench, "ecommerce", "test"))
    ctx = planner_ctx
    runs = {}
    for family in ("planner", "planner-json", "planner-grammar", "planner-grounded"):
        spec = get_method(f"{family}:{tiny_planner}")
        assert spec.name == f"{family}:sft"
        run = runs[family] = evaluate(small_index_cfg, "ecommerce", spec, instances, progress=False, ctx=ctx)
        _check_run(run.results, instances)
        if family in ("planner-grammar", "planner-grounded"):  # what the grammar admits validates
            # (an untrained model may write nesting past llguidance's Earley item cap, which then stops
            # constraining that one completion: a format failure, never a validation one)
            failed = [r.error for r in run.results if r.error and r.error.startswith("validation ")]
            assert not failed, failed
    # A fallback answers exactly what the planner left empty (failed or no document), nothing else.
    system = evaluate(small_index_cfg, "ecommerce", get_method(f"planner:{tiny_planner}?fallback=rrf"), instances,
                      progress=False, ctx=ctx)  # fmt: skip
    rrf = {r.qid: r for r in evaluate(small_index_cfg, "ecommerce", get_method("rrf"), instances, progress=False,
                                      ctx=ctx).results}  # fmt: skip
    alone = {r.qid: r for r in runs["planner"].results}
    assert any(not alone[r.qid].ids for r in system.results), "the tiny planner leaves some requests empty"
    for r in system.results:
        assert r.ids == (alone[r.qid].ids if alone[r.qid].ids else rrf[r.qid].ids), r.qid
    requests = [i.nl for i in instances]
    grounded = planner_completions(ctx, str(tiny_planner), requests, constraint="grounded")
    values = column_values(ctx)
    for nl, c in zip(
        requests, grounded, strict=True
    ):  # every phrase is the request's, every value the corpus's
        parsed = parse_completion(c.text)
        if parsed.program is not None:
            spans = Grounding.of(nl).spans
            assert all(e.query in spans for e in parsed.program.retrieval_list), (nl, c.text)
            literals = re.findall(r"brand = '((?:[^']|'')*)'", parsed.program.sql)
            assert all(v.replace("''", "'") in values["brand"] for v in literals), c.text
    constrained = planner_completions(ctx, str(tiny_planner), requests, constraint="json")
    loaded = [v for v in ctx.cache.values() if isinstance(v, LoadedPlanner)]
    assert len(loaded) == 2, "one engine per structured-output backend (xgrammar, llguidance)"
    shape = re.compile(r'^\{"(sql|retrieval_list)": ?["\[]')
    assert all(shape.match(c.text) for c in constrained), "the JSON schema fixes the program's shape"
    # The budget is the schema's longest program, so even this untrained model closes every one.
    assert [c.cut_at for c in constrained] == [None] * len(constrained)
    for c in constrained:  # strict JSON: the grammar's strings hold no raw control character
        assert set(json.loads(c.text)) == {"sql", "retrieval_list"}


@TINY_PLANNER_GROUP
@pytest.mark.slow
def test_execution_guided_decoding_resamples_only_what_failed(small_index_cfg: Config, train_bench: Workspace,
                                                              tiny_planner: Path,
                                                              planner_ctx: MethodContext) -> None:  # fmt: skip
    # Test and OOD requests, then training ones: enough that the 3-step planner fails some.
    instances = [i for s in ("test", "ood", "train") for i in load_split(train_bench, "ecommerce", s)][:40]
    ctx = planner_ctx
    greedy = evaluate(small_index_cfg, "ecommerce", get_method(f"planner-json:{tiny_planner}"), instances,
                      progress=False, ctx=ctx).results  # fmt: skip
    spec = get_method(f"planner-json:{tiny_planner}?samples=4")
    assert spec.name == "planner-json:sft-eg4"
    guided = evaluate(small_index_cfg, "ecommerce", spec, instances, progress=False, ctx=ctx).results
    _check_run(guided, instances)
    failed = [i for i, r in enumerate(greedy) if not r.ids]
    assert failed, "the 3-step planner fails some requests, so the second pass runs"
    for i, (g, r) in enumerate(zip(greedy, guided, strict=True)):
        if i not in failed:  # a greedy program that ranks something is kept as it was
            assert (r.ids, r.error) == (g.ids, g.error)
    # A failed request keeps its failure or gets a ranking a sample found (the engine's seed, not a
    # per-request one, drives the samples, so a second draw in this process would differ).
    assert all(
        guided[i].ids or (guided[i].ids, guided[i].error) == (greedy[i].ids, greedy[i].error) for i in failed
    )
    drawn = generate(ctx, str(tiny_planner), [instances[i].nl for i in failed], constraint="json", n=4,
                     temperature=0.7)  # fmt: skip
    assert [len(group) for group in drawn] == [4] * len(failed)


def test_the_program_grammar_admits_every_gold_program(train_bench: Workspace) -> None:
    import xgrammar

    from indexing.schema import schema_for
    from serving.dsl.grammar import program_grammar_ebnf

    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([chr(c) for c in range(128)]))
    for domain in ("ecommerce", "email"):
        grammar = compiler.compile_grammar(program_grammar_ebnf(schema_for(domain), STRUCTURED_LIMITS))
        golds = [
            i.program for split in ("train", "test", "ood") for i in load_split(train_bench, domain, split)
        ]
        assert golds
        refused = [g for g in golds if not xgrammar.GrammarMatcher(grammar).accept_string(g)]
        assert not refused, refused[:3]


def test_vote_keeps_the_ranking_most_samples_agree_on() -> None:
    a, b, bad = Outcome.ranked(["1", "2"]), Outcome.ranked(["2"]), Outcome.failed("validation sql_syntax: x")
    assert vote([bad, b, a, a]) == a
    assert vote([b, a]) == b, "a tie goes to the earliest sample"
    assert vote([bad, Outcome.ranked([])]) is None, "nothing ranked: the greedy outcome stands"


@pytest.mark.parametrize(
    "arg",
    [
        "ckpt?samples=x",
        "ckpt?samples=65",
        "ckpt?temperature=0",
        "ckpt?beam=2",
        "ckpt?samples",
        "ckpt?fallback=oracle",
        "ckpt?fuse=oracle",
        "ckpt?gate=unanimous",
        "ckpt?fuse=self-query&gate=majority",
    ],
)
def test_bad_planner_options_fail_in_one_line(arg: str) -> None:
    with pytest.raises(TrainError) as info:
        parse_decoding(arg)
    assert info.value.code == "planner_option" and "\n" not in str(info.value)


def test_planner_options_name_the_method_apart() -> None:
    assert parse_decoding("runs/sft/final") == ("runs/sft/final", Decoding())
    assert get_method("planner-grammar:runs/sft/final?samples=8").name == "planner-grammar:sft-eg8"
    assert get_method("planner:runs/sft/final?samples=8").name == "planner:sft-eg8"
    assert get_method("planner:runs/sft/final?samples=8&temperature=1").name == "planner:sft-eg8-t1"
    assert get_method("planner-grounded:runs/sft/final?fallback=rrf").name == "planner-grounded:sft-fb-rrf"
    fused = get_method("planner-grounded:runs/sft/final?samples=8&fuse=self-query&fallback=rrf")
    assert fused.name == "planner-grounded:sft-eg8-fuse-self-query-fb-rrf"
    assert "fused with self-query by weighted RRF" in fused.description
    gated = get_method("planner-grounded:runs/sft/final?samples=8&fuse=self-query&gate=unanimous")
    assert gated.name == "planner-grounded:sft-eg8-fuse-self-query-unanimous"
    assert gated.description.endswith("unless its programs are unanimous)")
    familiar = get_method(
        "seq2seq-grounded:runs/dapo/final?samples=8&fuse=self-query&gate=familiar&fallback=rrf"
    )
    assert familiar.name == "seq2seq-grounded:dapo-eg8-fuse-self-query-familiar-fb-rrf"
    assert "unless the request is worded like its training requests" in familiar.description
    with pytest.raises(TrainError, match="planner gate must be one of unanimous, familiar, with fuse"):
        get_method("planner:runs/sft/final?gate=familiar")


def test_fusion_ranks_every_program_and_the_partner_by_weighted_rrf(small_index_cfg: Config) -> None:
    """``&fuse=self-query``: the greedy program and its samples run for every request and their rankings are
    fused with self-query's, self-query weighing as much as all the programs; a request none of whose programs
    runs keeps its failure for the fallback."""
    good = json.dumps({"sql": "SELECT id FROM products WHERE price < 200 AND id IN <text_1>",
                       "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}]})  # fmt: skip
    cheap = good.replace("price < 200", "price < 50")
    script = {"headphones under 200": (good, [cheap, "not a program"]), "anything": ("no", ["nope", "none"])}
    run = guided_run(lambda ctx, requests: [Completion(script[r][0]) for r in requests],
                     lambda ctx, requests, n, t: [[Completion(c) for c in script[r][1][:n]] for r in requests],
                     Decoding(samples=2, fuse="self-query"))  # fmt: skip
    instances = [Inst(f"q{i}", nl, "", "P00000", "L1", ("text",)) for i, nl in enumerate(script)]
    ctx = MethodContext(small_index_cfg, "ecommerce")
    try:
        got = run(ctx, instances, 10)
        programs = execute(ctx, [good, cheap, "not a program"], 10)
        partner = get_method("self-query").run(ctx, instances, 10)
    finally:
        ctx.close()
    expected = fuse([o.ids for o in programs] + [partner[0].ids], [1.0, 1.0, 1.0, 3.0], 10)
    assert got[0].ids == tuple(doc for doc, _ in expected) and got[0].ids
    assert partner[0].ids and partner[0].ids[0] in got[0].ids, (
        "self-query's first outweighs any one program's"
    )
    assert got[1].ids is None and got[1].layer == "format", (
        "no program ran: the failure stays, for the fallback"
    )


def test_the_familiar_gate_answers_training_wording_by_the_greedy_program_alone(
    small_index_cfg: Config, tmp_path: Path
) -> None:
    """``&gate=familiar``: a request worded like the planner's training requests (its card's gate) whose greedy
    program ranks something keeps that program's ranking; any other request is fused as without the gate."""
    good = json.dumps({"sql": "SELECT id FROM products WHERE price < 200 AND id IN <text_1>",
                       "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}]})  # fmt: skip
    cheap = good.replace("price < 200", "price < 50")
    training = ("headphones under 200", "headphones under 150", "wireless earbuds under 100")
    card = {"profile": "compact", "domains": ["ecommerce"], "algorithm": "sft",
            "familiarity": Familiarity.calibrate({"ecommerce": training}).save(tmp_path)}  # fmt: skip
    (tmp_path / CARD).write_text(json.dumps(card))
    unlike = "zebra striped garden hose reel for a sailboat"
    script = {"headphones under 200": (good, [cheap, cheap]), unlike: (good, [cheap, cheap])}
    run = guided_run(lambda ctx, requests: [Completion(script[r][0]) for r in requests],
                     lambda ctx, requests, n, t: [[Completion(c) for c in script[r][1][:n]] for r in requests],
                     Decoding(samples=2, fuse="self-query", gate="familiar"), str(tmp_path))  # fmt: skip
    instances = [Inst(f"q{i}", nl, "", "P00000", "L1", ("text",)) for i, nl in enumerate(script)]
    ctx = MethodContext(small_index_cfg, "ecommerce")
    try:
        got = run(ctx, instances, 10)
        own, other = execute(ctx, [good, cheap], 10)
        partner = get_method("self-query").run(ctx, instances, 10)
    finally:
        ctx.close()
    assert got[0].ids == own.ids and own.ids, "familiar: the greedy program's own ranking"
    expected = fuse([own.ids, other.ids, other.ids, partner[1].ids], [1.0, 1.0, 1.0, 3.0], 10)
    assert got[1].ids == tuple(doc for doc, _ in expected), "unfamiliar: fused"
    with pytest.raises(TrainError, match="needs the planner's model directory"):
        guided_run(lambda ctx, requests: [], lambda ctx, requests, n, t: [],
                   Decoding(fuse="self-query", gate="familiar"))(MethodContext(small_index_cfg, "ecommerce"), instances, 10)  # fmt: skip


def test_structured_grammar_admits_no_raw_control_character() -> None:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([chr(c) for c in range(128)]))
    grammar = compiler.compile_grammar(program_grammar(PRODUCTS))
    ok = '{"sql": "SELECT id FROM products WHERE id IN <text_1>", "retrieval_list": [{"type": "text", ' \
         '"field": "review", "query": "quiet"}]}'  # fmt: skip
    assert xgrammar.GrammarMatcher(grammar).accept_string(ok)
    for bad in (ok.replace("SELECT id", "SELECT\tid"), ok.replace("quiet", "qu\x01iet")):
        assert not xgrammar.GrammarMatcher(grammar).accept_string(bad)


def test_a_completion_cut_by_the_budget_fails_as_format_truncated(small_index_cfg: Config) -> None:
    ctx = MethodContext(small_index_cfg, "ecommerce")
    try:
        cut, bad = execute(ctx, [Completion('{"sql": "SELECT id FROM products WHERE', cut_at=256),
                                 Completion('{"sql": ')], k=5)  # fmt: skip
    finally:
        ctx.close()
    assert cut.error is not None and cut.error.startswith(
        "format truncated: generation stopped at the budget of 256"
    )
    assert bad.error is not None and bad.error.startswith("format ") and "truncated" not in bad.error
    assert cut.layer == bad.layer == "format"
    assert failure_breakdown_of([cut, bad])["format"] == 2


def failure_breakdown_of(outcomes: list[object]) -> dict[str, int]:
    from rl.eval.runner import QueryResult

    return failure_breakdown([QueryResult(f"q{i}", "L1", "text", "P1", None, {}, (), o.error, o.layer)  # type: ignore[attr-defined]
                              for i, o in enumerate(outcomes)])  # fmt: skip


def test_few_shot_exemplars_cover_every_modality_group(train_bench: Workspace) -> None:
    train = list(load_split(train_bench, "ecommerce", "train"))
    shots = pick_exemplars(train)
    assert len(shots) == N_SHOTS
    chosen = [next(i for i in train if i.nl == nl) for nl, _ in shots]
    assert {modality_group(i.modalities) for i in chosen} == {modality_group(i.modalities) for i in train}


@pytest.mark.slow
def test_llm_method_runs_few_shot_against_a_vllm_server(small_index_cfg: Config, train_bench: Workspace,
                                                        vllm_server: str) -> None:  # fmt: skip
    instances = list(load_split(train_bench, "ecommerce", "test"))[:3]
    spec = get_method(f"llm:{vllm_server}")
    ctx = MethodContext(small_index_cfg, "ecommerce")
    ctx.cache[SHOTS_KEY] = pick_exemplars(list(load_split(train_bench, "ecommerce", "train")))
    try:
        chat = few_shot_messages(ctx, instances[0].nl)
        assert [m["role"] for m in chat] == ["system", *["user", "assistant"] * N_SHOTS, "user"]
        run = evaluate(small_index_cfg, "ecommerce", spec, instances, progress=False, ctx=ctx)
        _check_run(run.results, instances)
        assert ctx.cache["llm:model"] == PLANNER_NAME, "the endpoint's one model, as it lists it"
    finally:
        ctx.close()


@pytest.mark.parametrize(
    "arg",
    [
        "ckpt",
        "ckpt?url=localhost:8000/v1",
        "ckpt?url=http://h/v1&output=xml",
        "ckpt?url=http://h/v1&workers=0",
        "ckpt?url=http://h/v1&samples=8",
    ],
)
def test_bad_served_planner_options_fail_in_one_line(arg: str) -> None:
    from rl.eval.served_methods import parse_served

    with pytest.raises(TrainError) as info:
        parse_served(arg)
    assert info.value.code == "planner_option" and "\n" not in str(info.value)


def test_a_served_planner_is_named_by_its_run_and_output() -> None:
    served = get_method("planner-served:runs/sft/final?url=http://127.0.0.1:8000/v1&model=planner")
    assert served.name == "planner-served:sft"
    assert "as prore serve asks it" in served.description and "grounded decoding" in served.description
    assert (
        get_method("planner-served:runs/sft/final?url=http://h/v1&output=json").name
        == "planner-served:sft-json"
    )
