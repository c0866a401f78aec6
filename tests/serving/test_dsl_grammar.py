"""The program grammar, compiled by xgrammar: what it admits validates, and it refuses the mistakes a weak
planner makes that the JSON schema lets through (placeholders out of order or of the wrong modality,
entries left unused, a rerank wider than k, a literal of the wrong type, a column the corpus lacks)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from typing import Any

import pytest

from indexing.schema import EMAILS, PRODUCTS, CorpusSchema
from serving.dsl import DEFAULT_LIMITS, Program, Retrieval, parse_program, validate
from serving.dsl.grammar import MAX_STATES, grammar_entries, program_grammar_ebnf
from serving.dsl.grounding import Grounding
from serving.dsl.program import corpus_modalities
from serving.dsl.structured import constraint_grammar

xgrammar = pytest.importorskip("xgrammar", reason="the grammar is compiled by xgrammar (installed with vLLM)")
torch = pytest.importorskip("torch")

VOCAB = [chr(c) for c in range(32, 127)] + ["</s>"]
"""A character-level vocabulary, so a walk over the grammar can reach every program it admits."""
STOP = len(VOCAB) - 1


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    info = xgrammar.TokenizerInfo(VOCAB, stop_token_ids=[STOP])
    compiler = xgrammar.GrammarCompiler(info)
    return {s.domain: compiler.compile_grammar(program_grammar_ebnf(s)) for s in (EMAILS, PRODUCTS)}


def admits(compiled: dict[str, Any], schema: CorpusSchema, text: str) -> bool:
    matcher = xgrammar.GrammarMatcher(compiled[schema.domain])
    return bool(matcher.accept_string(text)) and bool(matcher.accept_token(STOP))


def walk(grammar: Any, rng: random.Random, cap: int = 4000) -> str | None:
    """A random program of ``grammar``: one allowed character at a time, leaning toward placeholders and
    closing quotes so that walks end and cover entries; None when ``cap`` characters did not close it."""
    matcher = xgrammar.GrammarMatcher(grammar)
    mask = xgrammar.allocate_token_bitmask(1, len(VOCAB))
    shifts = torch.arange(32, dtype=torch.int32)
    out: list[str] = []
    for _ in range(cap):
        matcher.fill_next_token_bitmask(mask)
        allowed = ((mask[0].unsqueeze(-1) >> shifts) & 1).flatten()[: len(VOCAB)].nonzero().flatten().tolist()
        if STOP in allowed:
            return "".join(out)
        lean = [t for t in allowed if VOCAB[t] in "<i"]
        closing = [t for t in allowed if VOCAB[t] in "\"')]}"]
        if lean and rng.random() < 0.5:
            token = rng.choice(lean)
        elif closing and rng.random() < 0.3:
            token = rng.choice(closing)
        else:
            token = rng.choice(allowed)
        assert matcher.accept_token(token)
        out.append(VOCAB[token])
    return None


@pytest.mark.parametrize("schema", [EMAILS, PRODUCTS], ids=lambda s: s.domain)
def test_every_program_the_grammar_admits_validates(compiled: dict[str, Any], schema: CorpusSchema) -> None:
    rng = random.Random(0)
    texts = [t for t in (walk(compiled[schema.domain], rng) for _ in range(150)) if t is not None]
    assert len(texts) >= 140, "the walks close their programs"
    entries = set()
    for text in texts:
        program = parse_program(text)
        validate(program, schema)  # raises on any rule the grammar failed to carry
        entries.add(len(program.retrieval_list))
    assert {0, 1, 2} <= entries, f"the walks cover programs with several entries, got {sorted(entries)}"


def _program(sql: str, *entries: Retrieval) -> str:
    return Program(f"SELECT DISTINCT id FROM products WHERE {sql}", entries).to_json()


TEXT, IMAGE = Retrieval("text", "review", "quiet"), Retrieval("image", "image", "red strap")


def test_the_grammar_admits_the_gold_forms(compiled: dict[str, Any]) -> None:
    for text in (
        _program("id IN <text_1>", TEXT),
        _program("brand = 'Levi''s' AND id NOT IN <text_1>", TEXT),
        _program("(price < 200 OR rating >= 4.5) AND id IN <text_1> AND id IN <image_2>", TEXT, IMAGE),
        _program("NOT (color IN ('white', 'silver')) AND toYear(release_date) BETWEEN 2020 AND 2022"),
        _program("in_stock = true AND release_date >= '2021-05-01' AND id IN <image_1>",
                 Retrieval("image", "image", "matte", mode="fuse", k=10, rerank=5)),
    ):  # fmt: skip
        assert admits(compiled, PRODUCTS, text), text
    email = Program("SELECT DISTINCT id FROM emails WHERE toDate(date) >= '2024-01-31' AND is_starred = false "
                    "AND id IN <text_1>", (Retrieval("text", "subject", "invoice"),)).to_json()  # fmt: skip
    assert admits(compiled, EMAILS, email)


@pytest.mark.parametrize(
    "text",
    [
        _program("id IN <text_2>", TEXT),  # placeholders are numbered in order
        _program("id IN <image_1>", TEXT),  # the entry of a placeholder has its modality
        _program("id IN <text_1>", TEXT, TEXT),  # an entry no placeholder names
        _program("id IN <text_1> AND id IN <text_2>", TEXT),  # a placeholder with no entry
        _program(
            "id IN <text_1>", Retrieval("text", "review", "quiet", k=5, rerank=10)
        ),  # rerank wider than k
        _program("id IN <text_1>", Retrieval("text", "image", "quiet")),  # an image field searched as text
        _program("id IN <text_1>", Retrieval("text", "review", "  ")),  # a blank query
        _program("price = 'cheap'"),  # a string for a number
        _program("in_stock = 'yes'"),  # a string for a boolean
        _program("colour = 'red'"),  # no such column
        _program("review = 'quiet'"),  # a text field is searched, not compared
        _program("release_date >= '2021-13-01'"),  # no such month
        _program("(price < 200"),  # unbalanced
        _program("price < 200").replace("DISTINCT ", ""),  # not the gold's head
        _program("color = 'red\tblue'"),  # a control character
    ],
)
def test_the_grammar_refuses_what_validation_or_the_engine_would(compiled: dict[str, Any], text: str) -> None:
    assert not admits(compiled, PRODUCTS, text)


def test_the_entry_cap_keeps_the_placeholder_states_bounded() -> None:
    assert grammar_entries(EMAILS) == DEFAULT_LIMITS.max_entries, "one modality: 9 states"
    n = grammar_entries(PRODUCTS)
    assert len(corpus_modalities(PRODUCTS)) == 2 and n == 5
    assert sum(2**j for j in range(n + 1)) <= MAX_STATES < sum(2**j for j in range(n + 2))


REQUEST = "Sony or Bose cans under $200, reviews praise the noise cancelling, not the white ones"
VALUES = {"brand": ("Bose", "Sony", "Levi's"), "color": ("white", "black"), "category": ("headphones",)}


@pytest.fixture(scope="module")
def grounded() -> Any:
    info = xgrammar.TokenizerInfo(VOCAB, stop_token_ids=[STOP])
    text = program_grammar_ebnf(PRODUCTS, DEFAULT_LIMITS, Grounding.of(REQUEST, VALUES))
    return xgrammar.GrammarCompiler(info).compile_grammar(text)


def _accepts(grammar: Any, text: str) -> bool:
    matcher = xgrammar.GrammarMatcher(grammar)
    return bool(matcher.accept_string(text)) and bool(matcher.accept_token(STOP))


def test_a_grounded_grammar_admits_the_requests_phrases_and_the_corpus_values(grounded: Any) -> None:
    ok = _program("brand IN ('Sony', 'Bose') AND price < 200 AND id IN <text_1> AND NOT (color = 'white')",
                  Retrieval("text", "review", "noise cancelling"))  # fmt: skip
    assert _accepts(grounded, ok)
    lower = _program("id IN <text_1>", Retrieval("text", "review", "sony or bose cans"))  # a span, lowercased
    assert _accepts(grounded, lower)
    escaped = _program("brand = 'Levi''s'")  # a value with a quote, as SQL writes it
    assert _accepts(grounded, escaped)


@pytest.mark.parametrize(
    "text",
    [
        _program(
            "id IN <text_1>", Retrieval("text", "review", "auto-start")
        ),  # a phrase the request never said
        _program("id IN <text_1>", Retrieval("text", "review", "cancelling noise")),  # words out of order
        _program("brand = 'Sennheiser'"),  # a value the column does not hold
        _program("color = 'White'"),  # values are the column's own spelling
    ],
)
def test_a_grounded_grammar_refuses_invented_phrases_and_values(grounded: Any, text: str) -> None:
    assert not _accepts(grounded, text)


def test_every_program_a_grounded_grammar_admits_validates_and_copies_the_request(grounded: Any) -> None:
    rng = random.Random(1)
    texts = [t for t in (walk(grounded, rng) for _ in range(150)) if t is not None]
    assert len(texts) >= 140
    spans = set(Grounding.of(REQUEST).spans)
    queries = 0
    for text in texts:
        program = parse_program(text)
        validate(program, PRODUCTS)
        for entry in program.retrieval_list:
            queries += 1
            assert entry.query in spans, entry.query
    assert queries >= 10, "the walks reach search entries"


def test_a_request_without_words_keeps_the_free_query_rule() -> None:
    assert program_grammar_ebnf(PRODUCTS, DEFAULT_LIMITS, Grounding.of("  ?! ")) == program_grammar_ebnf(
        PRODUCTS
    )


def test_xgrammars_token_mask_still_drops_a_token_its_matcher_accepts() -> None:
    """Why ``planner-grammar:`` and ``planner-grounded:`` decode through llguidance
    (``rl.eval.planner_methods.GRAMMAR_BACKEND``): xgrammar 0.2.8's mask never allows `` = '`` beside a token `` '``,
    though its matcher accepts it. When this fails, xgrammar has fixed it: reconsider the backend."""
    info = xgrammar.TokenizerInfo([" '", " = '"])
    grammar = xgrammar.GrammarCompiler(info).compile_grammar('root ::= " = \'"')
    mask = xgrammar.allocate_token_bitmask(1, info.vocab_size)
    xgrammar.GrammarMatcher(grammar).fill_next_token_bitmask(mask)
    assert xgrammar.GrammarMatcher(grammar).accept_token(1)
    assert int(mask[0, 0]) >> 1 & 1 == 0, "xgrammar now allows the token: reconsider GRAMMAR_BACKEND"


@pytest.mark.parametrize("schema", [EMAILS, PRODUCTS], ids=lambda s: s.domain)
def test_llguidance_reads_the_plain_and_the_grounded_grammar(schema: CorpusSchema) -> None:
    llguidance = pytest.importorskip("llguidance", reason="vLLM's guidance backend")
    texts = [program_grammar_ebnf(schema, DEFAULT_LIMITS, g) for g in (None, Grounding.of(REQUEST, VALUES))]
    texts += [constraint_grammar(schema, "grammar", DEFAULT_LIMITS, lark=True),
              constraint_grammar(schema, "grounded", DEFAULT_LIMITS, request=REQUEST, values=VALUES)]  # fmt: skip
    for text in texts:
        grammar = llguidance.grammar_from("grammar", text)
        assert llguidance.LLMatcher.validate_grammar(grammar) == "", "no error and no warning"


def test_the_lark_grammar_carries_the_grounding_of_the_ebnf_one() -> None:
    pytest.importorskip("llguidance", reason="vLLM's guidance backend")
    lark = constraint_grammar(PRODUCTS, "grounded", DEFAULT_LIMITS, request=REQUEST, values=VALUES)
    grounding = Grounding.of(REQUEST, VALUES)
    assert f"QUERY: {grounding.query_rule()}" in lark
    assert "STR_BRAND: \"'Bose'\" | \"'Levi''s'\" | \"'Sony'\"" in lark
    assert '"brand" (EQ STR_BRAND | IN STR_BRAND (", " STR_BRAND)' in lark
    assert constraint_grammar(PRODUCTS, "grammar", DEFAULT_LIMITS, lark=True).count("STR_BRAND") == 0


_GRAMMAR_DIGEST = """
import hashlib
from indexing.schema import EMAILS, PRODUCTS
from serving.dsl.grammar import program_grammar_ebnf
print(hashlib.sha256((program_grammar_ebnf(PRODUCTS) + program_grammar_ebnf(EMAILS)).encode()).hexdigest())
"""


def test_the_grammar_text_is_the_same_in_every_process() -> None:
    """vLLM caches a compiled grammar by its text, and a run is reproduced from it: no set or hash order may
    reach it (string hashing is salted per process, ``PYTHONHASHSEED``)."""
    here = hashlib.sha256(
        (program_grammar_ebnf(PRODUCTS) + program_grammar_ebnf(EMAILS)).encode()
    ).hexdigest()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", _GRAMMAR_DIGEST], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed})  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == here, seed
