"""What a grounded grammar costs llguidance per request, with its condition rules keyed two ways, side by side.

A grounded grammar (:mod:`serving.dsl.grounding`) differs per request, so vLLM's ``guidance`` backend
validates it in the front end and compiles it in the engine core for every request the planner decodes
(``planner-grounded:`` in evaluation, ``prore serve``'s default decoding). Most of its text is the condition
rules that carry the placeholder state (:func:`serving.dsl.grammar._condition`). Candidates, one language:

- ``pair-keyed``: a rule per pair of states before and after it (``or_s{a}_s{b}``), the design before;
- ``offset-keyed``: a rule per (placeholders written before, modalities written within), what it is now.

For each domain and candidate, over the first ``--requests`` test-split requests of the workspace's benchmark,
with the corpus's column values and a trained planner's tokenizer: the grammar's size, and the median
milliseconds of llguidance's validation (what vLLM's front end does) and of building the matcher (what its
engine core does). Each candidate's program grammar must accept every gold program of those requests. Prints a
table; writes ``bench/results/grammar_compile.json``.

    python bench/grammar_compile.py --workspace W --planner RUN/final [--requests 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import RESULTS, machine, run_main, write_results

from indexing.schema import CorpusSchema
from serving.dsl import grammar
from serving.dsl.program import corpus_modalities, placeholder_of

DEFAULT_OUT = RESULTS / "grammar_compile.json"


def _pair_keyed(schema: CorpusSchema, states: list[str]) -> list[str]:
    """The condition rules as they were: indexed by the states before (``a``) and after (``b``); the rules of
    a whole program's condition (``a`` empty) named as the program rules now call them (``or_0_s{b}``)."""
    name = {m[0]: m for m in corpus_modalities(schema)}

    def rule(kind: str, a: str, b: str) -> str:
        return f"{kind}_0_s{b}" if not a else f"{kind}_s{a}_s{b}"

    rules = []
    for b in states:
        for i in range(len(b) + 1):
            a = b[:i]
            mids = [b[:j] for j in range(i, len(b) + 1)]
            rules.append(f"{rule('or', a, b)} ::= {rule('and', a, b)} | "
                         + " | ".join(f'{rule("and", a, m)} " OR " {rule("or", m, b)}' for m in mids))  # fmt: skip
            rules.append(f"{rule('and', a, b)} ::= {rule('un', a, b)} | "
                         + " | ".join(f'{rule("un", a, m)} " AND " {rule("and", m, b)}' for m in mids))  # fmt: skip
            unary = [f'"NOT (" {rule("or", a, b)} ")"', f'"(" {rule("or", a, b)} ")"']
            if a == b:
                unary.append("pred")
            elif len(b) == len(a) + 1:
                ph = placeholder_of(name[b[-1]], len(a))
                unary.append(f'"id IN {ph}" | "id NOT IN {ph}"')
            rules.append(f"{rule('un', a, b)} ::= {' | '.join(unary)}")
    return rules


@contextmanager
def _keyed(candidate: str) -> Iterator[None]:
    """Build grammars with ``candidate``'s condition rules (the grammar caches emptied on the way in and out)."""
    from serving.dsl import structured

    def clear() -> None:
        for module in (grammar, structured):
            for fn in vars(module).values():
                if callable(getattr(fn, "cache_clear", None)):
                    fn.cache_clear()

    kept = grammar._condition
    clear()
    if candidate == "pair-keyed":
        grammar._condition = _pair_keyed
    try:
        yield
    finally:
        grammar._condition = kept
        clear()


def _accepts_every(text: str, programs: list[str], lltok: Any) -> bool:
    """Whether the grammar ``text`` accepts each of ``programs`` whole."""
    import llguidance

    compiled = llguidance.LLMatcher.grammar_from_lark(text)
    for program in programs:
        matcher = llguidance.LLMatcher(lltok, compiled)
        if not matcher.consume_tokens(lltok.tokenize_str(program)) or not matcher.is_accepting():
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "--workspace", required=True, type=Path, help="workspace with both domains' benchmarks"
    )
    parser.add_argument(
        "--planner", required=True, type=Path, help="a trained planner (RUN/final): its tokenizer"
    )
    parser.add_argument(
        "--requests", type=int, default=50, help="test-split requests per domain (default 50)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    from indexing.config import load_config
    from indexing.schema import schema_for
    from indexing.workspace import Workspace
    from rl.datasets.store import load_split
    from rl.eval.methods import MethodContext
    from rl.eval.planner_methods import column_values
    from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar

    lltok = llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(args.planner))
    cfg = load_config(workspace=args.workspace)
    rows: list[dict[str, Any]] = []
    for domain in ("ecommerce", "email"):
        schema = schema_for(domain)
        insts = load_split(Workspace(args.workspace), domain, "test")[: args.requests]
        values = column_values(MethodContext(cfg, domain))
        for candidate in ("pair-keyed", "offset-keyed"):
            sizes, validate, build = [], [], []
            with _keyed(candidate):
                program_grammar = constraint_grammar(schema, "grammar", STRUCTURED_LIMITS, lark=True)
                if not _accepts_every(program_grammar, [i.program for i in insts], lltok):
                    raise SystemExit(f"{candidate}: the program grammar refuses a gold program of {domain}")
                for inst in insts:
                    text = constraint_grammar(schema, "grounded", STRUCTURED_LIMITS, request=inst.nl, values=values,
                                              lark=True)  # fmt: skip
                    t0 = time.perf_counter()
                    compiled = llguidance.LLMatcher.grammar_from_lark(text)
                    error = llguidance.LLMatcher.validate_grammar(
                        compiled, lltok
                    )  # what vLLM's front end runs
                    t1 = time.perf_counter()
                    matcher = llguidance.LLMatcher(lltok, compiled)
                    t2 = time.perf_counter()
                    if error or matcher.is_error():
                        raise SystemExit(f"{candidate}: llguidance refused the grammar of {inst.qid}")
                    sizes.append(len(text))
                    validate.append(t1 - t0)
                    build.append(t2 - t1)
            rows.append({"domain": domain, "candidate": candidate, "requests": len(insts),
                         "grammar_chars": int(statistics.median(sizes)),
                         "validate_ms": round(1000 * statistics.median(validate), 2),
                         "matcher_ms": round(1000 * statistics.median(build), 2)})  # fmt: skip
    for r in rows:
        base = next(b for b in rows if b["domain"] == r["domain"])
        r["speed_up"] = round(
            (base["validate_ms"] + base["matcher_ms"]) / (r["validate_ms"] + r["matcher_ms"]), 2
        )
    print(
        f"{'domain':10} {'candidate':13} {'grammar chars':>14} {'validate ms':>12} {'matcher ms':>11} {'speed-up':>9}"
    )
    for r in rows:
        print(f"{r['domain']:10} {r['candidate']:13} {r['grammar_chars']:>14} {r['validate_ms']:>12} "
              f"{r['matcher_ms']:>11} {r['speed_up']:>8}x")  # fmt: skip
    info = machine()
    print(
        f"medians over {args.requests} test requests per domain; every gold program accepted by both; {info}"
    )
    write_results(args.out, {"machine": info, "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
