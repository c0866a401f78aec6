"""How long a scaling run should take, and what the sizes not built would have taken: the embedding throughput
that decides a neural embedder's sizes, the build time of the next size, and power laws fitted to the sizes
built."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from indexing.config import EmbedderConfig
from indexing.schema import PRODUCTS, Role
from rl.eval.scale.runs import BUILD_STAGES, DOMAIN, LEVELS, size_label


def embed_rate(embedder: str, sample: int = 256) -> float:
    """Products per second the embedder encodes here (every vector field, as the build embeds them)."""
    from indexing.chunks import embed_unique
    from indexing.corpora import generate
    from indexing.embedders import make_embedder

    table = next(generate(DOMAIN, 2048, seed=0, chunk_rows=2048))
    emb = make_embedder(EmbedderConfig(text=embedder, image=embedder), Role.TEXT)
    emb.embed(table.column("title").to_pylist()[:128])  # weights, sessions, export: not throughput
    rows = table.slice(1024, sample)
    t0 = time.perf_counter()
    for f in PRODUCTS.vector_fields:
        embed_unique(emb, rows.column(f).to_pylist())
    return sample / (time.perf_counter() - t0)


def pick_neural_sizes(
    sizes: Sequence[int], rate: float, budget_s: float, built: Callable[[int], bool]
) -> tuple[list[int], dict[str, float]]:
    """The sizes, smallest first, whose embedding (at ``rate`` products/s) fits ``budget_s`` in total;
    sizes already built cost nothing. Returns them and each size's estimated embedding seconds."""
    keep: list[int] = []
    spent = 0.0
    estimate = {size_label(n): round(n / rate, 1) for n in sizes}
    for n in sizes:
        cost = 0.0 if built(n) else n / rate
        if spent + cost > budget_s:
            break
        spent += cost
        keep.append(n)
    return keep, estimate


def estimate_build_s(done: Sequence[Mapping[str, Any]], docs: int) -> float | None:
    """Seconds a build of ``docs`` should take, scaled from the largest size built (per doc, x1.15)."""
    if not done:
        return None
    last = max(done, key=lambda r: r["docs"])
    total = float(last["build"]["seconds"]["total"])
    return total * (docs / int(last["docs"])) * 1.15


def power_fit(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of seconds = a * docs**b by least squares in log space; ``b`` 1 with one point."""
    pts = [(n, s) for n, s in points if s and s > 0 and not math.isnan(s)]
    if not pts:
        return None
    if len(pts) == 1:
        n, s = pts[0]
        return s / n, 1.0
    xs, ys = [math.log(n) for n, _ in pts], [math.log(s) for _, s in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - b * mx), b


def extrapolate(results: Sequence[Mapping[str, Any]], docs: int) -> dict[str, Any]:
    """Each build stage's seconds at ``docs`` from a power law fitted to the sizes built (the largest three)."""
    built = sorted(results, key=lambda r: r["docs"])[-3:]
    out: dict[str, Any] = {"from_sizes": [r["docs"] for r in built], "seconds": {}, "exponent": {}}
    for stage in BUILD_STAGES:
        fit = power_fit([(r["docs"], r["build"]["seconds"].get(stage, math.nan)) for r in built])
        if fit is not None:
            a, b = fit
            out["seconds"][stage] = round(a * docs**b, 1)
            out["exponent"][stage] = round(b, 2)
    # The two largest sizes alone: the local growth, which a fit over a wider range can understate.
    if len(built) > 1:
        (n0, r0), (n1, r1) = [(r["docs"], r["build"]["seconds"]) for r in built[-2:]]
        out["seconds_from_last_two"], out["exponent_last_two"] = {}, {}
        for stage in BUILD_STAGES:
            fit = power_fit([(n0, r0.get(stage, math.nan)), (n1, r1.get(stage, math.nan))])
            if fit is not None:
                out["seconds_from_last_two"][stage] = round(fit[0] * docs ** fit[1], 1)
                out["exponent_last_two"][stage] = round(fit[1], 2)
    # The same law for each candidate's p50 per level (a trend of the sizes measured, not a measurement).
    out["p50_ms"] = {}
    for name in dict.fromkeys(n for r in built for n in r["candidates"]):
        per_level = {}
        for lv in LEVELS:
            pts = [(r["docs"], r["candidates"][name]["latency"].get(lv, {}).get("p50_ms") or math.nan)
                   for r in built if name in r["candidates"]]  # fmt: skip
            fit = power_fit(pts) if len(pts) > 1 else None
            if fit is not None:
                per_level[lv] = round(fit[0] * docs ** fit[1], 1)
        out["p50_ms"][name] = per_level
    return out
