"""The in-process half of ``bench/reward.py``: the benchmark's configuration, its two sets of rollouts (synthetic,
and sampled from a trained planner), the work each child process measures (the one-by-one loop, the engine's
stage budget of a step, padded against length-grouped embedding), and the rollouts the service and the loop
scored differently.

``bench/reward.py`` runs each of these in a child process of its own (``--child``), since chDB binds one data
path per process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROMPTS, SAMPLES = 512, 16
DOMAIN = "ecommerce"

BACKEND_ENV = "PRORE_BENCH_MINILM_BACKEND"
"""How the children learn ``--minilm-backend`` (they run ``config`` in their own processes)."""
MILVUS_ENV = "PRORE_BENCH_MILVUS_URI"
"""How the children learn the Milvus server of the deployment they measure (unset: Milvus Lite)."""
DEPLOYMENTS = ("lite", "server")
CANDIDATES_ENV = "PRORE_BENCH_CANDIDATES"
"""How the service's config and the children learn where conditioned dense searches are scored: ``store``
(the engine's default) or ``process`` (``serving.planning.candidates_in_process``)."""
CANDIDATES = ("store", "process")
THREADS_ENV = "PRORE_BENCH_SEARCH_THREADS"
"""How the service's config and the children learn ``serving.engine.search_threads`` (unset: the default)."""


def _default_threads() -> int:
    from serving.settings import CacheSizes

    return CacheSizes().search_threads


def search_threads() -> int:
    """The store searches this run's engines keep in flight at once (:data:`THREADS_ENV`)."""
    return int(os.environ.get(THREADS_ENV) or _default_threads())


def engine_variants(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """The engine settings measured side by side (``--candidates`` by ``--search-threads``), each named as the
    table shows it (empty for the only one) with the environment its service and children read."""
    out: dict[str, dict[str, str]] = {}
    for candidates in args.candidates:
        for threads in args.search_threads:
            name = []
            if args.candidates != ["store"]:
                name.append(f"cand. {candidates}")
            if len(args.search_threads) > 1 or threads != _default_threads():
                name.append(f"{threads} search thr.")
            out[", ".join(name)] = {CANDIDATES_ENV: candidates, THREADS_ENV: str(threads)}
    return out


def in_process() -> bool:
    """Whether this run scores conditioned dense searches in process (:data:`CANDIDATES_ENV`)."""
    return os.environ.get(CANDIDATES_ENV, "store") == "process"


def config(workspace: Path) -> Any:
    from indexing.config import Config, EmbedderConfig, MilvusConfig
    from serving.settings import CacheSizes, PlanningOptions, ServingSettings

    backend = os.environ.get(BACKEND_ENV, "onnx")
    cfg = Config(workspace=workspace, embedder=EmbedderConfig(text="minilm", image="minilm", minilm_backend=backend),
                 milvus=MilvusConfig(uri=os.environ.get(MILVUS_ENV) or None))  # fmt: skip
    return cfg.with_section(ServingSettings(engine=CacheSizes(search_threads=search_threads()),
                                            planning=PlanningOptions(candidates_in_process=in_process())))  # fmt: skip


def config_file(workspace: Path) -> Path:
    """The reward service's config file: the same embedder backend and vector store as :func:`config`."""
    cfg = config(workspace)
    path = workspace / "bench-config.yaml"
    text = f"embedder:\n  minilm_backend: {cfg.embedder.minilm_backend}\n"
    if cfg.milvus.uri:
        text += f"milvus:\n  uri: {json.dumps(cfg.milvus.uri)}\n"
    text += (f"serving:\n  engine:\n    search_threads: {search_threads()}\n"
             f"  planning:\n    candidates_in_process: {str(in_process()).lower()}\n")  # fmt: skip
    path.write_text(text)
    return path


# -- rollouts (built in a child process: chDB binds one path per process) ----------------------------


def wrap(program: dict[str, Any], style: int, rng: random.Random) -> str:
    text = json.dumps(program, ensure_ascii=False)
    if style == 0:
        return text
    if style == 1:
        return f"<think>{rng.choice(['cheap', 'a brand and a phrase', 'exclude the look'])}</think>\n{text}"
    if style == 2:
        return f"```json\n{text}\n```"
    return (
        "<think>"
        + " ".join(rng.choice(["let", "me", "think", "about", "price"]) for _ in range(700))
        + "</think>"
        + text
    )


def invalid(program: dict[str, Any], kind: int) -> dict[str, Any]:
    bad: dict[str, Any] = json.loads(json.dumps(program))
    if kind == 0:
        bad["sql"] = bad["sql"].replace(
            "DISTINCT id FROM products WHERE", "DISTINCT id FROM products WHERE colour = 'red' AND", 1
        )
    elif kind == 1:
        bad["retrieval_list"][0]["field"] = "reviews"
    else:
        bad["sql"] = bad["sql"].replace("id IN <text_1>", "<text_1> IN id", 1)
    return bad


def garbage(program: dict[str, Any], kind: int) -> str:
    text = json.dumps(program)
    return ["Here is the program: " + text, text[: len(text) // 2], "I cannot help with that."][kind]


def ensure_index(workspace: Path, size: int) -> None:
    """Generate the corpus and build its index on the configured vector store, unless they exist."""
    from common import ensure_corpus

    from indexing.build import build_index

    ensure_corpus(workspace, size)
    build_index(config(workspace), DOMAIN, progress=sys.stderr.isatty())


def build_rollouts(workspace: Path, size: int, seed: int) -> dict[str, Any]:
    """Build the corpus and index if needed, then 512 x 16 rollouts with their gold ids."""
    import engine_programs as engine_bench  # the L1/L2/L3 program shapes of bench/engine.py

    from indexing.workspace import Workspace
    from rl.datasets.errors import BenchError
    from rl.datasets.store import load_split
    from serving.dsl import parse_program
    from serving.engine import Engine, ExecutionResult

    cfg = config(workspace)
    ws = Workspace(workspace)
    ensure_index(workspace, size)
    eng = Engine.open(cfg, DOMAIN)
    rng = random.Random(seed)
    prompts: list[tuple[dict[str, Any], str, list[dict[str, Any]]]] = []
    source = "generated programs"
    try:
        instances = load_split(ws, DOMAIN, "train")
        source = "benchmark instances (train split)"
        for inst in rng.sample(instances, min(PROMPTS, len(instances))):
            prompts.append((inst.program_dict, inst.gold_id, []))
    except BenchError:
        pass
    docs = engine_bench.sample_docs(eng, 2 * PROMPTS + 8, seed=seed)
    variants = engine_bench.VARIANTS
    i = 0
    while len(prompts) < PROMPTS:
        d, other = docs[i % len(docs)], docs[(i + 1) % len(docs)]
        prog = engine_bench.program(rng.choice((1, 2, 2, 3)), d, other, random.Random(f"{seed}-{i}"))
        i += 1
        result = eng.execute(parse_program(prog), k=20)
        if result.ids:
            prompts.append((prog, result.ids[0], []))
    rollouts: list[dict[str, Any]] = []
    for n, (gold_prog, gold_id, _) in enumerate(prompts):
        prng = random.Random(f"{seed}-p{n}")
        d, other = docs[n % len(docs)], docs[(n + 3) % len(docs)]
        wrong = engine_bench.program(prng.choice((1, 2, 3)), d, other, prng, **prng.choice(variants))
        samples: list[str] = [wrap(gold_prog, s % 3, prng) for s in range(5)]
        samples += [wrap(wrong, 0, prng)] * 4
        for _ in range(4):
            samples.append(
                wrap(
                    engine_bench.program(prng.choice((1, 2, 3)), d, other, prng, **prng.choice(variants)),
                    0,
                    prng,
                )
            )
        samples.append(json.dumps(invalid(gold_prog, prng.randrange(3))))
        samples.append(
            garbage(gold_prog, prng.randrange(3)) if prng.random() < 0.5 else json.dumps(invalid(wrong, 0))
        )
        samples.append(wrap(gold_prog, 3, prng))  # right, but thinks far too long
        prng.shuffle(samples)
        rollouts += [{"completion": c, "domain": DOMAIN, "gold_id": gold_id, "prompt": n} for c in samples]
    checked = eng.execute_many([parse_program(p) for p, _, _ in prompts[:8]], k=20)
    assert all(isinstance(r, ExecutionResult) for r in checked)
    eng.close()
    completions = [r["completion"] for r in rollouts]
    return {
        "source": source,
        "rollouts": rollouts,
        "distinct_completions": len(set(completions)),
        "corpus_docs": size,
    }


def build_sampled(
    workspace: Path, size: int, seed: int, planner: Path, planner_workspace: Path
) -> dict[str, Any]:
    """512 train requests of ``planner_workspace``'s benchmark, 16 samples each from ``planner`` at temperature
    1.0, with each request's gold id read from the bench's own index (its gold program's first result)."""
    from indexing.config import load_config
    from rl.datasets.store import load_split
    from rl.eval.methods import MethodContext
    from rl.eval.planner_methods import generate
    from serving.dsl import parse_program
    from serving.engine import Engine, ExecutionResult

    ensure_index(workspace, size)
    from indexing.workspace import Workspace

    instances = load_split(Workspace(planner_workspace), DOMAIN, "train")
    rng = random.Random(seed)
    # Gold programs written for the planner's corpus; on another corpus some rank nothing: draw spares.
    picked = rng.sample(instances, min(2 * PROMPTS, len(instances)))
    eng = Engine.open(config(workspace), DOMAIN)
    golds = eng.execute_many([parse_program(inst.program) for inst in picked], k=20)
    eng.close()
    chosen = [(inst, g.ids[0]) for inst, g in zip(picked, golds, strict=True)
              if isinstance(g, ExecutionResult) and g.ids][:PROMPTS]  # fmt: skip
    if len(chosen) < PROMPTS:
        raise SystemExit(f"error sampled_rollouts: only {len(chosen)} of {PROMPTS} train requests have a gold "
                         "result on the bench's index; synthesize a larger train split")  # fmt: skip
    ctx = MethodContext(load_config(workspace=planner_workspace), DOMAIN)
    start = time.perf_counter()
    try:
        samples = generate(ctx, str(planner), [inst.nl for inst, _ in chosen], n=SAMPLES, temperature=1.0)
    finally:
        ctx.close()
    elapsed = time.perf_counter() - start
    rollouts = [{"completion": c.text, "domain": DOMAIN, "gold_id": gold, "prompt": n}
                for n, ((_, gold), got) in enumerate(zip(chosen, samples, strict=True)) for c in got]  # fmt: skip
    completions = [r["completion"] for r in rollouts]
    per_prompt = [len({r["completion"] for r in rollouts if r["prompt"] == n}) for n in range(len(chosen))]
    return {
        "source": f"{SAMPLES} samples per request from the planner {planner.parent.name}/{planner.name} (temperature 1.0)",
        "rollouts": rollouts,
        "distinct_completions": len(set(completions)),
        "distinct_per_prompt_median": statistics.median(per_prompt),
        "sampling_s": elapsed,
        "corpus_docs": size,
    }


# -- the one-by-one loop (a child process) ----------------------------------------------------------


def one_by_one(workspace: Path, rollouts_file: Path, prompts: int) -> dict[str, Any]:
    from rl.reward import RewardItem, RewardScorer
    from rl.reward.service import warmup_items

    items = [r for r in json.loads(rollouts_file.read_text())["rollouts"] if r["prompt"] < prompts]
    scorer = RewardScorer.open(config(workspace), [DOMAIN])
    scorer.score(warmup_items([DOMAIN]))
    latencies, keys = [], []
    start = time.perf_counter()
    for r in items:
        t = time.perf_counter()
        res = scorer.score([RewardItem(r["completion"], r["domain"], r["gold_id"])])[0]
        latencies.append((time.perf_counter() - t) * 1000)
        keys.append(key(res.to_dict()))
    elapsed = time.perf_counter() - start
    scorer.close()
    return {"n": len(items), "elapsed_s": elapsed, "latencies_ms": latencies, "keys": keys,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip


def stage_budget(workspace: Path, rollouts_file: Path) -> dict[str, Any]:
    """The step in-process, as the service batches it (512 items a batch, programs deduplicated as the
    scorer does), with the engine's own stage times summed over each batch's programs: where the step's
    time goes, without HTTP and without the clients on the same cores."""
    from rl.reward import RewardScorer
    from rl.reward.parse import parse_completion
    from rl.reward.service import warmup_items
    from serving.engine import STAGES, ExecutionResult

    items = json.loads(rollouts_file.read_text())["rollouts"]
    scorer = RewardScorer.open(config(workspace), [DOMAIN])
    scorer.score(warmup_items([DOMAIN]))
    engine = scorer.engines[DOMAIN]
    stages = dict.fromkeys(STAGES, 0.0)
    programs = 0
    start = time.perf_counter()
    for at in range(0, len(items), 512):
        unique: dict[str, Any] = {}
        for r in items[at : at + 512]:
            parsed = parse_completion(r["completion"])
            if parsed.program is not None:
                unique.setdefault(parsed.program.to_json(explicit=True), parsed.program)
        results = engine.execute_many(list(unique.values()), k=scorer.config.cutoff)
        programs += len(unique)
        for res in results:
            if isinstance(res, ExecutionResult):
                for stage in STAGES:
                    stages[stage] += res.timings.get(stage, 0.0) / 1000
    wall = time.perf_counter() - start
    calls = dict(engine.retriever.calls)
    scorer.close()
    return {"wall_s": wall, "programs": programs, "stage_s": stages, "store_calls": calls,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip


def embed_compare(rollouts_file: Path, repeats: int = 5) -> dict[str, Any]:
    """The step's distinct search phrases through the ONNX MiniLM, side by side: batches of 64 padded to their
    longest text (the embedder before length grouping) and batches of one token count (now); medians of
    ``repeats`` runs, and the largest difference between the two sets of vectors."""
    import numpy as np

    from indexing.embedders.onnx import INPUTS, OnnxMiniLMEmbedder, _session, _tokenizer
    from rl.reward.parse import parse_completion

    phrases: dict[str, None] = {}
    for r in json.loads(rollouts_file.read_text())["rollouts"]:
        program = parse_completion(r["completion"]).program
        for entry in program.retrieval_list if program is not None else ():
            phrases.setdefault(entry.query)
    texts = list(phrases)
    grouped = OnnxMiniLMEmbedder()

    def padded(batch: list[str]) -> Any:
        out = []
        for at in range(0, len(batch), 64):
            enc = _tokenizer().encode_batch(batch[at : at + 64])
            feed = {name: np.array([getattr(e, attr) for e in enc], dtype=np.int64)
                    for name, attr in zip(INPUTS, ("ids", "attention_mask", "type_ids"), strict=True)}  # fmt: skip
            out.append(_session(False, False).run(["embedding"], feed)[0])
        rows = np.concatenate(out)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    grouped.embed(texts[:64])  # load the session and the tokenizer
    times: dict[str, list[float]] = {"padded": [], "length groups": []}
    vectors: dict[str, Any] = {}
    for _ in range(repeats):
        for name, fn in (("padded", padded), ("length groups", grouped.embed)):
            start = time.perf_counter()
            vectors[name] = fn(texts)
            times[name].append(time.perf_counter() - start)
    lengths = [sum(e.attention_mask) for e in _tokenizer().encode_batch(texts)]
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {"phrases": len(texts), "tokens_median": statistics.median(lengths), "tokens_max": max(lengths),
            "median_s": medians, "ratio": medians["length groups"] / medians["padded"],
            "max_abs_diff": float(np.abs(vectors["padded"] - vectors["length groups"]).max())}  # fmt: skip


def key(result: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in result.items() if k != "timings"}, sort_keys=True)


# -- the service path (this process: clients; a child: the service) ---------------------------------


def disagreements(
    service: Sequence[str | None],
    loop: Sequence[str],
    subset: Sequence[int],
    rollouts: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The rollouts the two paths scored differently: how many, by (service error, loop error), and a few of them."""
    pairs: dict[str, int] = {}
    examples: list[dict[str, Any]] = []
    for j, i in enumerate(subset):
        if service[i] == loop[j]:
            continue
        text = service[i]
        got = json.loads(text) if text else {}
        ref = json.loads(loop[j])
        why = f"service {got.get('error')}{' (timed out)' if got.get('timed_out') else ''} / loop {ref.get('error')}"
        pairs[why] = pairs.get(why, 0) + 1
        if len(examples) < 5:
            examples.append(
                {"rollout": i, "completion": rollouts[i]["completion"][:300], "service": got, "loop": ref}
            )
    return {"n": sum(pairs.values()), "by_errors": pairs, "examples": examples}
