"""Property: any program the language's strategies draw (valid, near-valid, or mangled JSON text) either
executes or raises a typed error; the engine never crashes, and a batch agrees with single runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ProReError
from indexing.config import Config
from indexing.schema import PRODUCTS
from serving.dsl import FormatError, Program, parse_program
from serving.engine import CacheSizes, Engine, ExecutionResult
from tests.serving.strategies import near_valid_programs, program_sources, programs


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    e = Engine.open(small_index_cfg, "ecommerce")
    yield e
    e.close()


any_program = st.one_of(programs(PRODUCTS), near_valid_programs(PRODUCTS), program_sources(PRODUCTS))

K = 10


def check_result(res: ExecutionResult) -> None:
    assert len(res.ids) <= K and len(res.ids) == len(res.scores) == len(set(res.ids))
    assert all(s >= 0 for s in res.scores)
    for name, ids in res.candidates.items():
        assert len(ids) <= 50 and len(ids) == len(set(ids)), name


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(drawn=st.lists(any_program, min_size=1, max_size=5))
def test_programs_execute_or_raise_a_typed_error(engine: Engine, drawn: list[Program | str]) -> None:
    batch = []
    for source in drawn:
        # Text is read at the edge, as a caller does; what is no program never reaches the engine.
        try:
            batch.append(source if isinstance(source, Program) else parse_program(source))
        except FormatError as exc:
            assert exc.code and "\n" not in exc.one_line()
    outcomes = engine.execute_many(batch, k=K)
    single = Engine(engine.handle, caches=CacheSizes.disabled())
    for program, outcome in zip(batch, outcomes, strict=True):
        assert isinstance(outcome, ExecutionResult | ProReError)
        try:
            alone = single.execute(program, k=K)
        except ProReError as exc:
            assert isinstance(outcome, ProReError) and outcome.code == exc.code
            assert exc.code and "\n" not in exc.one_line()
            continue
        assert isinstance(outcome, ExecutionResult), outcome
        check_result(outcome)
        assert (outcome.ids, outcome.scores, outcome.sql) == (alone.ids, alone.scores, alone.sql)
