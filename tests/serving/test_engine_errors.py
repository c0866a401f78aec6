"""A program's cached rejection is raised as a fresh error each time: the same data, a traceback that does
not grow with each raise, and a separate object in every batch slot."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import pytest

from indexing.config import Config
from serving.dsl import DslError, Program, Retrieval, ValidationError
from serving.engine import Engine

BAD = Program(
    "SELECT id FROM products WHERE colour = 'red' AND id IN <text_1>",
    (Retrieval("text", "review", "quiet"),),
)


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


def raised(engine: Engine) -> tuple[DslError, int]:
    """The error ``execute`` raises and the length of its traceback right then."""
    with pytest.raises(ValidationError) as info:
        engine.execute(BAD)
    return info.value, len(traceback.extract_tb(info.value.__traceback__))


def test_repeated_raises_keep_one_traceback_length(engine: Engine) -> None:
    pairs = [raised(engine) for _ in range(5)]
    errors = [e for e, _ in pairs]
    lengths = [n for _, n in pairs]
    assert len(set(lengths)) == 1, lengths
    assert len({id(e) for e in errors}) == len(errors)
    assert {e.one_line() for e in errors} == {errors[0].one_line()}
    assert errors[0].to_dict() == errors[-1].to_dict()
    assert (errors[0].code, errors[0].path, errors[0].position) == ("unknown_column", "sql", 30)
    assert engine.cache_stats()["programs"]["hits"] >= 4


def test_batch_slots_hold_distinct_errors(engine: Engine) -> None:
    outcomes = engine.execute_many([BAD, BAD, BAD])
    assert all(isinstance(o, ValidationError) for o in outcomes)
    assert len({id(o) for o in outcomes}) == 3
    assert len({o.one_line() for o in outcomes if isinstance(o, DslError)}) == 1
    again = engine.execute_many([BAD])[0]
    assert isinstance(again, ValidationError)
    assert again is not outcomes[0] and again.__traceback__ is None
