"""The one prompt builder: schema and rules per profile, example values and programs that the real
validator accepts, and values that the generated corpora really hold."""

from __future__ import annotations

import pyarrow as pa
import pytest

from indexing.corpora import generate
from indexing.schema import DOMAINS, Role, schema_for
from rl.prompt import (
    EXAMPLE_PROGRAMS,
    PromptConfig,
    PromptError,
    example_values,
    messages,
    system_prompt,
)
from serving.dsl import DEFAULT_LIMITS, parse_program, validate


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_example_program_of_each_corpus_validates(domain: str) -> None:
    v = validate(parse_program(EXAMPLE_PROGRAMS[domain]), schema_for(domain))
    assert v.retrieval_list and v.positive_entries


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("profile", ["full", "short"])
def test_every_field_is_listed_with_its_type_and_role(domain: str, profile: str) -> None:
    text = system_prompt(domain, PromptConfig(profile=profile))  # type: ignore[arg-type]
    schema = schema_for(domain)
    lines = {ln.split(":")[0][2:]: ln for ln in text.splitlines() if ln.startswith("- ")}
    assert list(lines) == list(schema.columns)
    for f in schema.fields:
        assert f"- {f.name}: {f.dtype.value}, " in lines[f.name]
        assert ("structured" if f.role is Role.STRUCTURED else f.role.value) in lines[f.name]
        assert (f.doc in lines[f.name]) is (profile == "full")
    assert f"SELECT id FROM {schema.table}" in text
    assert EXAMPLE_PROGRAMS[domain] in text


def test_full_spells_out_the_rpl_extensions_and_short_leaves_them_out() -> None:
    full, short = system_prompt("ecommerce"), system_prompt("ecommerce", PromptConfig(profile="short"))
    ladder = ", ".join(map(str, DEFAULT_LIMITS.k_ladder))
    assert '"rerank"' in full and ladder in full and "1/(60 + rank" in full
    assert '"rerank"' not in short and ladder not in short
    assert len(short) < 0.6 * len(full)


@pytest.mark.parametrize("domain", DOMAINS)
def test_compact_names_every_field_under_its_role_in_one_line(domain: str) -> None:
    text = system_prompt(domain, PromptConfig(profile="compact"))
    schema = schema_for(domain)
    assert "\n" not in text and f"over {schema.table}." in text
    groups = dict(part.split(" fields: ") for part in text.split(". ", 1)[1].rstrip(".").split("; "))
    want = {"Structured": Role.STRUCTURED, "text": Role.TEXT, "image": Role.IMAGE}
    assert {label: names.split(", ") for label, names in groups.items()} == {
        label: [f.name for f in schema.fields if f.role is role]
        for label, role in want.items() if any(f.role is role for f in schema.fields)}  # fmt: skip
    assert len(text) < 0.25 * len(system_prompt(domain, PromptConfig(profile="short")))


def test_a_corpus_without_images_gets_no_image_rules() -> None:
    email, products = system_prompt("email"), system_prompt("ecommerce")
    assert "<image_k>" not in email and "image" not in email.split("Rules:")[1]
    assert "<text_k> and <image_k>" in products


@pytest.mark.parametrize("domain", DOMAINS)
def test_example_values_are_literals_the_validator_accepts_for_their_field(domain: str) -> None:
    schema = schema_for(domain)
    for name, values in example_values(domain).items():
        assert schema.field(name).role is Role.STRUCTURED
        for lit in values:
            validate(parse_program({"sql": f"SELECT id FROM {schema.table} WHERE {name} = {lit}",
                                    "retrieval_list": []}), schema)  # fmt: skip


@pytest.mark.parametrize("domain", DOMAINS)
def test_string_examples_shown_by_the_short_profile_occur_in_a_generated_corpus(domain: str) -> None:
    table = pa.concat_tables(list(generate(domain, 600, seed=0)))
    schema = schema_for(domain)
    for name, values in example_values(domain).items():
        if schema.field(name).dtype.value != "string":
            continue
        held = {str(x) for x in table.column(name).to_pylist()}
        for lit in values[:2]:
            assert lit.strip("'").replace("''", "'") in held, (name, lit)


def test_messages_put_system_then_shots_then_the_request() -> None:
    shot = ("cheap speakers", '{"sql": "SELECT id FROM products WHERE price < 50", "retrieval_list": []}')
    msgs = messages("ecommerce", "red phones", profile="short", shots=[shot])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == system_prompt("ecommerce", PromptConfig(profile="short"))
    assert (msgs[1]["content"], msgs[2]["content"], msgs[3]["content"]) == (*shot, "red phones")


def test_a_bad_profile_is_one_typed_line() -> None:
    with pytest.raises(PromptError) as err:
        PromptConfig(profile="tiny")  # type: ignore[arg-type]
    assert (
        err.value.one_line()
        == "error prompt_profile: unknown prompt profile 'tiny'; choose one of full, short, compact, request"
    )


def test_the_prompt_is_the_same_on_every_call() -> None:
    assert system_prompt("email") == system_prompt("email")
    assert messages("email", "x") == messages("email", "x")
