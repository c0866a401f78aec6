# fmt: off
"""``prore eval``: evaluate a method on a benchmark split, and compare stored runs.

    prore eval ecommerce --method bm25 [--split test|ood|human] [--limit N] [--k 20]
    prore eval compare [--domain D] [--split S] [--baseline METHOD] [--allow-mismatch] [RUN ...]
"""
# fmt: on

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

from core.flags import Flag, Flags
from core.settings import Section
from indexing.config import Config
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.eval.errors import EvalError
from rl.settings import SECTION, EvalSettings, RlSettings
from serving.settings import ServingSettings

HUMAN = "human"
"""The hand-written split (:mod:`rl.datasets.human`): packaged requests judged on the workspace's corpus at
evaluation time, never a stored split, never trained on."""
EVAL_SPLITS: tuple[str, ...] = ("test", "ood", "train", HUMAN)
"""Splits that can be evaluated; ``test`` is the default, ``train`` is for checking fit, ``human`` measures
generalization to hand-written requests (read its P@1 and nDCG@10, not Hit@1)."""

T = TypeVar("T")


def spread(items: Sequence[T], limit: int | None) -> list[T]:
    """At most ``limit`` items taken evenly across ``items``, so every level keeps its share.

    >>> spread(list(range(10)), 3)
    [0, 4, 9]
    """
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise EvalError(f"--limit must be positive, got {limit}")
    if limit == 1:
        return [items[0]]
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def check_split(split: str) -> str:
    """``split`` if it can be evaluated, else an :class:`EvalError` naming the known splits."""
    if split not in EVAL_SPLITS:
        raise EvalError(
            f"unknown split {split!r}; choose one of {', '.join(EVAL_SPLITS)}", code="unknown_split"
        )
    return split


def load_instances(cfg: Config, domain: str, split: str) -> list[Any]:
    """The benchmark instances of ``domain``/``split`` from the workspace (for ``human``: the packaged
    requests with a non-empty relevant set on the workspace's corpus, see :func:`rl.datasets.human.load_human`)."""
    from rl.datasets.store import load_split

    if split == HUMAN:
        from rl.datasets.human import load_human

        human = load_human(cfg, domain)
        print(human.summary_line())
        return list(human.instances)
    instances: list[Any] = list(load_split(Workspace(cfg.workspace), domain, split))
    if not instances:
        raise EvalError(f"the {domain} {split} split has no queries", code="no_benchmark")
    return instances


def benchmark_identity(cfg: Config, domain: str) -> dict[str, Any]:
    """The workspace benchmark's manifest entries a run records, with its published version."""
    from rl.datasets.store import load_manifest

    ws = Workspace(cfg.workspace)
    manifest = load_manifest(ws, domain)
    return {**manifest, "version": ws.bench_dir(domain).name}


EVAL_FLAGS: Flags[RlSettings] = Flags(
    Section(SECTION, RlSettings),
    Flag("eval.k", metavar="K"),
    Flag("eval.batch_size", metavar="N"),
    Flag("eval.resamples", metavar="N"),
    Flag("eval.confidence", metavar="C"),
    Flag("eval.seed", metavar="S"),
)
"""The flags of ``prore eval DOMAIN`` that set ``rl.eval``: built from :class:`~rl.settings.EvalSettings`' fields,
whose checks refuse a bad value (``--k 2``: ``rl.eval.k must be at least 3``)."""


def eval_settings(args: argparse.Namespace, cfg: Config) -> EvalSettings:
    """The config's ``rl.eval`` section with the flags given on the command line put over it."""
    return EVAL_FLAGS.over(cfg.section(RlSettings), args).eval


def _run_eval(args: argparse.Namespace, cfg: Config) -> int:
    from rl.eval.methods import MethodContext, get_method
    from rl.eval.report import failures_table, headline, load_summary, write_run
    from rl.eval.runner import evaluate

    domain = args.eval_domain
    split = check_split(args.split)
    settings = eval_settings(args, cfg)
    if args.limit is not None and args.limit < 1:
        raise EvalError(f"--limit must be positive, got {args.limit}")
    # An unknown method fails before any benchmark or index is opened.
    specs = [get_method(m) for m in dict.fromkeys(args.method)]
    planning = dataclasses.asdict(cfg.section(ServingSettings).planning)
    if split == HUMAN:
        from rl.datasets.human import HUMAN_NOTE, load_human

        if any(spec.name == "oracle" for spec in specs):
            raise EvalError("the human split has no gold program (its judgements are a WHERE plus facet labels), "
                            "so the oracle does not apply; sql-only runs the judgement's WHERE", code="no_gold_program")  # fmt: skip
        human = load_human(cfg, domain)
        print(human.summary_line())
        if not human.instances:
            raise EvalError(
                f"no human {domain} request has a relevant document in this corpus", code="no_benchmark"
            )
        benchmark = human.identity
        instances = spread(list(human.instances), args.limit)
    else:
        from rl.datasets.store import planning_mismatch

        benchmark = benchmark_identity(cfg, domain)
        instances = spread(load_instances(cfg, domain, split), args.limit)
        mismatch = planning_mismatch(benchmark, planning)
        if mismatch is not None:
            print(f"note: {mismatch}")
    ws = Workspace(cfg.workspace)
    # The methods of one call share a context: the index, the engine, MiniLM and any model open once.
    ctx = MethodContext(cfg, domain)
    try:
        for spec in specs:
            run = evaluate(cfg, domain, spec, instances, split=split, k=settings.k, batch_size=settings.batch_size,
                           progress=not args.quiet, ctx=ctx, benchmark=benchmark,
                           meta={"limit": args.limit, "planning": planning})  # fmt: skip
            run_dir = write_run(
                ws, run, resamples=settings.resamples, confidence=settings.confidence, seed=settings.seed
            )
            summary = load_summary(run_dir)
            print(f"{run.method} on {domain}/{split}: {len(run.results)} queries in {run.elapsed_s:.1f} s")
            print(headline(summary))
            print(failures_table(summary))
            print(f"report: {run_dir}")
    finally:
        ctx.close()
    if split == HUMAN:
        print(HUMAN_NOTE)
    return 0


def _pools(specs: Sequence[str]) -> dict[str, list[str]]:
    """``LABEL=METHOD,METHOD,...`` options as a mapping; a malformed one is an :class:`EvalError`."""
    pools: dict[str, list[str]] = {}
    for spec in specs:
        label, sep, members = spec.partition("=")
        methods = [m.strip() for m in members.split(",") if m.strip()]
        if not sep or not label.strip() or len(methods) < 2 or label.strip() in pools:
            raise EvalError(f"--pool {spec!r}: expected a new LABEL=METHOD,METHOD[,...] naming two or more methods",
                            code="bad_pool")  # fmt: skip
        pools[label.strip()] = methods
    return pools


def _run_compare(args: argparse.Namespace, cfg: Config) -> int:
    from rl.eval.compare import compare

    if args.domain is not None:
        schema_for(args.domain)
    split = check_split(args.split)
    settings = cfg.section(RlSettings).eval
    result = compare(
        Workspace(cfg.workspace),
        args.runs,
        domain=args.domain,
        split=split,
        allow_mismatch=args.allow_mismatch,
        baseline=args.baseline,
        pools=_pools(args.pool or []),
        resamples=settings.resamples,
        confidence=settings.confidence,
        seed=settings.seed,
    )
    print(result.table)
    print(f"comparison: {result.path}")
    return 0


def register_eval(sub: Any) -> None:
    """Add ``prore eval`` (one sub-command per domain, plus ``compare``) to the ``prore`` parser."""
    p = sub.add_parser(
        "eval",
        help="evaluate a retrieval method on a benchmark split, or compare stored runs",
        description="Evaluate a method and store a report (markdown, JSON, PNG charts) under "
        "<workspace>/reports/eval: Hit@1/3, MRR and NDCG@3 against the gold document, P@1, P@5, "
        "nDCG@10 and R@10 against each instance's relevant set, execution rate, and a failure breakdown, "
        "with bootstrap 95% CIs.",
    )
    targets = p.add_subparsers(
        dest="eval_target", metavar="{" + "|".join(DOMAINS) + "|compare}", required=True
    )
    for domain in DOMAINS:
        d = targets.add_parser(domain, help=f"evaluate a method on the {domain} benchmark")
        d.add_argument(
            "--method",
            required=True,
            action="append",
            help="registered method: bm25, dense, rrf, self-query, sql-only, oracle; planner:PATH[?samples=N], "
            "planner-json:PATH[?samples=N] (JSON-schema output), planner-grammar:PATH[?samples=N] "
            "(program-grammar output), planner-grounded:PATH (prore serve's decoding), "
            "planner-served:PATH?url=URL (a served planner, asked as prore serve asks it), seq2seq:PATH, "
            "seq2seq-grounded:PATH, llm:URL[#MODEL]; or one a plugin adds. Repeat it to evaluate several "
            "methods in one process, one report each, opening the index and the engines once",
        )
        d.add_argument("--split", default="test",
                       help="benchmark split: test (default), ood, train, or human (the packaged hand-written requests, "
                       "judged on this workspace's corpus; read P@1 and nDCG@10)")  # fmt: skip
        d.add_argument(
            "--limit", type=int, default=None, help="evaluate N queries spread evenly over the split"
        )
        EVAL_FLAGS.add_to(d)
        d.add_argument("--quiet", action="store_true", help="no progress bar")
        d.set_defaults(handler=_run_eval, eval_domain=domain)
    c = targets.add_parser(
        "compare",
        help="put stored runs side by side, with paired differences against a baseline on shared queries",
    )
    c.add_argument(
        "runs", nargs="*", metavar="RUN", help="run directories (default: latest run of each method)"
    )
    c.add_argument("--domain", default=None, help="domain whose latest runs to compare")
    c.add_argument("--split", default="test", help="split whose latest runs to compare (default test)")
    c.add_argument(
        "--baseline",
        metavar="METHOD",
        default=None,
        help="method the others are paired against (default: the first run)",
    )
    c.add_argument("--pool", action="append", metavar="LABEL=METHOD,METHOD[,...]",
                   help="also pool several runs of one recipe (training seeds) against the baseline as LABEL, with a "
                   "CI that resamples the runs as well as the queries (repeatable)")  # fmt: skip
    c.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare runs over different benchmarks, index versions or query sets, flagged",
    )
    c.set_defaults(handler=_run_compare)
