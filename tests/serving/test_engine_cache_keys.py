"""The engine's program cache: keyed by one kind of input only (a typed Program's canonical JSON), so
no text can collide with a program that was validated before, and no cached error can shadow one."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from indexing.config import Config
from serving.dsl import FormatError, Program, Retrieval, ValidationError, parse_program
from serving.engine import Engine, ExecutionResult

PROGRAM = Program(
    "SELECT id FROM products WHERE price < 300 AND id IN <text_1>",
    (Retrieval("text", "review", "great noise cancelling"),),
)


@pytest.fixture
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


def collisions(program: Program) -> list[str]:
    """The texts the cache once keyed a Program and a mapping under."""
    return [
        "P" + program.to_json(explicit=True),
        "M" + json.dumps(program.to_dict(explicit=True), sort_keys=True, ensure_ascii=False),
    ]


@pytest.mark.parametrize("which", [0, 1])
def test_text_shaped_like_a_cache_key_gets_no_validated_result(engine: Engine, which: int) -> None:
    assert isinstance(engine.execute(PROGRAM, k=5), ExecutionResult)
    text = collisions(PROGRAM)[which]
    # Read at the edge, the text is no program.
    with pytest.raises(FormatError):
        parse_program(text)
    # Handed to the engine untyped, it is a caller's bug, not a cache hit.
    with pytest.raises(TypeError):
        engine.execute(text, k=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.execute_many([PROGRAM, text], k=5)  # type: ignore[list-item]
    # Wrapped as SQL it is validated on its own and rejected.
    with pytest.raises(ValidationError):
        engine.execute(Program(text, PROGRAM.retrieval_list), k=5)
    assert engine.cache_stats()["programs"]["size"] == 2


def test_a_cached_error_does_not_shadow_a_valid_program(engine: Engine) -> None:
    text = collisions(PROGRAM)[0]
    with pytest.raises((TypeError, FormatError)):
        engine.execute(text, k=5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        engine.execute(Program(text, PROGRAM.retrieval_list), k=5)
    result = engine.execute(PROGRAM, k=5)
    assert result.ids == Engine(engine.handle).execute(PROGRAM, k=5).ids


def test_equal_programs_share_one_entry(engine: Engine) -> None:
    parsed = parse_program(PROGRAM.to_json())
    explicit = parse_program(PROGRAM.to_json(explicit=True))
    outcomes = engine.execute_many([PROGRAM, parsed, explicit], k=5)
    assert all(isinstance(o, ExecutionResult) for o in outcomes)
    assert engine.cache_stats()["programs"]["size"] == 1
