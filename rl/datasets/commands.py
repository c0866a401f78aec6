# fmt: off
"""``prore bench``: synthesize a benchmark, and show what one holds.

    prore bench synth {ecommerce|email} [DOMAIN ...] [--train N --test N --ood N] [--seed S] [--rewriter URL]
    prore bench show {ecommerce|email} [--split test] [--n 5]
"""
# fmt: on

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from indexing.config import Config
from indexing.corpora.files import corpus_manifest
from indexing.schema import DOMAINS, schema_for
from indexing.workspace import Workspace
from rl.datasets.rewriter import RewriterConfig
from rl.datasets.store import (
    DEFAULT_SIZES,
    RELEVANT_CAP,
    SPLITS,
    Instance,
    check_sizes,
    load_manifest,
    load_split,
)


def _synth(args: argparse.Namespace, cfg: Config) -> int:
    from rl.datasets.synth import SynthConfig, synthesize_domains, unlabeled_note

    domains = list(dict.fromkeys(args.domain))
    for domain in domains:
        schema_for(domain)
    sizes = {"train": args.train, "test": args.test, "ood": args.ood}
    check_sizes(sizes)
    rewriter = RewriterConfig(url=args.rewriter, model=args.rewriter_model) if args.rewriter else None
    scfg = SynthConfig(sizes=sizes, seed=args.seed, rewriter=rewriter, progress=not args.quiet)
    manifests = synthesize_domains(cfg, domains, scfg)
    ws = Workspace(cfg.workspace)
    for domain, manifest in zip(domains, manifests, strict=True):
        counts = ", ".join(f"{s} {n}" for s, n in manifest["splits"].items())
        print(
            f"{domain} benchmark: {counts} in {manifest['elapsed_s']:.1f} s "
            f"({manifest['instances_per_s']:.1f} instances/s)"
        )
        print(f"written to {ws.bench_dir(domain)}")
        note = unlabeled_note(domain, corpus_manifest(ws, domain))
        if note is not None:
            print(note)
    return 0


def _table(title: str, counts: Counter[str], total: int) -> list[str]:
    lines = [f"{title}:"]
    width = max((len(k) for k in counts), default=0)
    for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {key:<{width}}  {n:>7}  {n / max(total, 1):6.1%}")
    return lines


def relevance_lines(items: list[Instance]) -> list[str]:
    """The distribution of relevant-set sizes per level, or why the split has no relevant sets."""
    from rl.datasets.synth import NO_LABELS, size_stats

    if not items or all(i.relevant_n is None for i in items):
        return [f"relevant sets: n/a ({NO_LABELS})"]
    lines = [f"relevant-set sizes (documents satisfying the whole request; ids stored up to {RELEVANT_CAP}):"]
    lines.append(
        f"  {'level':<6} {'n':>6} {'min':>5} {'median':>7} {'mean':>8} {'p90':>6} {'max':>6} {'=1':>6} {'capped':>7}"
    )
    for level in sorted({i.level for i in items}):
        st = size_stats([i.relevant_n for i in items if i.level == level and i.relevant_n is not None])
        if st["n"]:
            lines.append(
                f"  {level:<6} {st['n']:>6} {st['min']:>5} {st['median']:>7} {st['mean']:>8} {st['p90']:>6} "
                f"{st['max']:>6} {st['single']:>6} {st['capped']:>7}"
            )
    return lines


def describe(instances: Iterable[Instance], n_examples: int) -> str:
    """Level, modality, operator, template-family and relevant-set statistics plus ``n_examples`` examples."""
    items = list(instances)
    total = len(items)
    levels = Counter(i.level for i in items)
    mods = Counter("+".join(i.modalities) for i in items)
    ops = Counter(op for i in items for op in i.operators)
    fams = Counter(i.family for i in items)
    lines = [f"{total} instances"]
    lines += _table("levels", levels, total)
    lines += _table("modalities", mods, total)
    lines += _table("operators (share of instances using each)", ops, total)
    lines += _table("template families", fams, total)
    if any(i.rewritten for i in items):
        lines.append(f"rewritten by an LLM: {sum(i.rewritten for i in items)}")
    lines.append(
        f"noisy wording: {sum(i.noisy for i in items)} ({sum(i.noisy for i in items) / max(total, 1):.1%})"
    )
    lines.append(
        f"distinct requests: {len({i.nl for i in items})}, distinct programs: {len({i.program for i in items})}"
    )
    lines += relevance_lines(items)
    step = max(total // max(n_examples, 1), 1)
    examples = items[::step][:n_examples]
    if examples:
        lines.append("examples:")
    for inst in examples:
        noisy = ", noisy" if inst.noisy else ""
        rel = "" if inst.relevant_n is None else f", {inst.relevant_n} relevant"
        lines.append(
            f"  [{inst.qid}] {inst.level} {'+'.join(inst.modalities)} ({inst.family}{noisy}) gold {inst.gold_id}{rel}"
        )
        lines.append(f"    nl:      {inst.nl}")
        lines.append(f"    program: {json.dumps(inst.program_dict, ensure_ascii=False)}")
    return "\n".join(lines)


def _show(args: argparse.Namespace, cfg: Config) -> int:
    schema_for(args.domain)
    ws = Workspace(cfg.workspace)
    if args.n < 0:
        from rl.datasets.errors import BenchError

        raise BenchError(f"--n must be zero or more, got {args.n}", code="bench_size")
    instances = load_split(ws, args.domain, args.split)
    manifest = load_manifest(ws, args.domain)
    print(
        f"{args.domain} / {args.split} (seed {manifest.get('seed')}, corpus {manifest.get('corpus_fingerprint')}, "
        f"index {manifest.get('index_version')})"
    )
    for line in wording_lines(manifest):
        print(line)
    print(describe(instances, args.n))
    return 0


def wording_lines(manifest: Mapping[str, Any]) -> list[str]:
    """Distinct requests and programs of every split as the manifest records them, with their share of
    the split, and how many candidates synthesis dropped because their request was already taken.

    >>> print("\\n".join(wording_lines({"sizes": {"train": 4}, "distinct_nl": {"train": 4},
    ...     "distinct_programs": {"train": 3}, "stats": {"train": {"rejected": {"duplicate": 2}}}})))
    distinct requests and programs per split:
      split     size  requests         programs         duplicates dropped
      train        4  4 (100.0%)       3 (75.0%)                         2
    """
    nl, programs = manifest.get("distinct_nl"), manifest.get("distinct_programs")
    if not isinstance(nl, Mapping) or not isinstance(programs, Mapping):
        return []
    lines = [
        "distinct requests and programs per split:",
        f"  {'split':<5} {'size':>8}  {'requests':<16} {'programs':<16} {'duplicates dropped':>18}",
    ]
    sizes = manifest.get("sizes", {})
    for split in sorted(sizes, key=lambda s: (SPLITS.index(s) if s in SPLITS else len(SPLITS), s)):
        size = sizes[split]
        n = max(int(size), 1)
        dup = manifest.get("stats", {}).get(split, {}).get("rejected", {}).get("duplicate", 0)
        req = f"{nl.get(split, 0)} ({nl.get(split, 0) / n:.1%})"
        prog = f"{programs.get(split, 0)} ({programs.get(split, 0) / n:.1%})"
        lines.append(f"  {split:<5} {size:>8}  {req:<16} {prog:<16} {dup:>18}")
    return lines


def register_bench(sub: Any) -> None:
    """Add ``prore bench synth`` and ``prore bench show`` to the ``prore`` parser."""
    p = sub.add_parser(
        "bench",
        help="synthesize benchmark queries with gold programs, or show a benchmark",
        description="Benchmarks of natural-language requests, each with a gold retrieval program whose "
        "gold document comes out first. Stored under <workspace>/bench/<domain>.",
    )
    actions = p.add_subparsers(dest="bench_action", metavar="{synth|show}", required=True)
    s = actions.add_parser(
        "synth",
        help="synthesize the train, test and OOD splits of a domain (or of several, side by side)",
        description="Sample condition structures (L1/L2/L3), make leaf conditions from gold documents, "
        "compile and execute gold programs (kept only when the gold document ranks first) and verbalize "
        "them. Needs a built index of the domain (prore index build).",
    )
    s.add_argument("domain", nargs="+", help="corpus domain: " + " or ".join(DOMAINS) + "; several domains are "
                   "synthesized side by side in one process (one thread each), each as it would be alone")  # fmt: skip
    splits = {"train": "training instances", "test": "test instances",
              "ood": "OOD instances: held-out template families and paraphrases"}  # fmt: skip
    for split, what in splits.items():
        s.add_argument(f"--{split}", type=int, default=DEFAULT_SIZES[split], metavar="N",
                       help=f"{what} (default {DEFAULT_SIZES[split]})")  # fmt: skip
    s.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same benchmark")
    s.add_argument(
        "--rewriter",
        metavar="URL",
        default=None,
        help="OpenAI-compatible endpoint (e.g. http://host:8000/v1) that rewrites each request; "
        "responses are cached in the workspace",
    )
    s.add_argument(
        "--rewriter-model", metavar="NAME", default="default", help="model name sent to the rewriter"
    )
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(handler=_synth)
    w = actions.add_parser(
        "show",
        help="print statistics and examples of a benchmark split",
        description="Level, modality, operator and template-family statistics of one split, plus examples.",
    )
    w.add_argument("domain", help="corpus domain: " + " or ".join(DOMAINS))
    w.add_argument("--split", default="test", help="split to show: " + ", ".join(SPLITS) + " (default test)")
    w.add_argument("--n", type=int, default=5, help="examples to print (default 5)")
    w.set_defaults(handler=_show)
