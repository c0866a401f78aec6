"""One path from completions to classified outcomes (rl.eval.outcome), on the session's real engines."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from indexing.config import Config
from rl.eval.methods import MethodContext, Outcome
from rl.eval.outcome import Failure, read_completion, run_completions, run_programs
from serving.engine import ExecutionResult

GOOD = json.dumps({"sql": "SELECT id FROM products WHERE id IN <text_1>",
                   "retrieval_list": [{"type": "text", "field": "title", "query": "wireless headphones"}]})  # fmt: skip
INVALID = json.dumps({"sql": "SELECT id FROM products WHERE colour = 'red'", "retrieval_list": []})


@pytest.fixture(scope="module")
def ctx(small_index_cfg: Config) -> Iterator[MethodContext]:
    context = MethodContext(small_index_cfg, "ecommerce")
    yield context
    context.close()


def test_each_item_is_a_result_or_a_failure_in_its_layer(ctx: MethodContext) -> None:
    got = run_completions(ctx.engine, [GOOD, "Sure! here it is", INVALID, GOOD], k=5)
    assert isinstance(got[0], ExecutionResult) and got[0].ids
    assert isinstance(got[1], Failure) and got[1].layer == "format"
    assert (
        isinstance(got[2], Failure)
        and got[2].layer == "validation"
        and got[2].line().startswith("validation ")
    )
    assert got[3] is got[0], "the same canonical program runs once and both items share its result"
    outcomes = [Outcome.of(r) for r in got]
    assert [o.layer for o in outcomes] == [None, "format", "validation", None]
    assert outcomes[0].ids == got[0].ids


def test_a_failure_passed_in_stays_in_place(ctx: MethodContext) -> None:
    given = Failure("format", "truncated", "generation stopped")
    program = read_completion(GOOD)
    assert not isinstance(program, Failure)
    got = run_programs(ctx.engine, [given, program], k=5)
    assert got[0] is given and isinstance(got[1], ExecutionResult)
    assert run_programs(ctx.engine, [given], k=5) == [given], "nothing to run: no engine call needed"
