"""A scaling benchmark's curves against corpus size: build seconds per stage, p50 per level, empty share and
P@1."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rl.eval.scale.runs import BUILD_STAGES, GOAL_P50_MS, LEVELS, size_label

STAGE_LABELS = {
    "generate": "corpus generation",
    "clickhouse": "ClickHouse load",
    "embed": "embedding",
    "milvus": "Milvus insert + index build",
    "bm25": "BM25",
    "total": "total",
}


def plots(results: Mapping[str, Any], where: Path, stem: str) -> list[str]:
    """Build seconds per stage, p50 per level and empty share / P@1 against corpus size, as PNGs."""
    from core.errors import require

    matplotlib: Any = require("matplotlib", "eval")
    matplotlib.use("Agg", force=True)
    plt: Any = require("matplotlib.pyplot", "eval")
    require("matplotlib.ticker", "eval")
    runs = results["runs"]
    embedders = list(dict.fromkeys(r["embedder"] for r in runs))
    styles = ["-", "--", ":", "-."]
    written = []

    def series(e: str) -> list[Mapping[str, Any]]:
        return sorted((r for r in runs if r["embedder"] == e), key=lambda r: r["docs"])

    sizes = sorted({r["docs"] for r in runs})

    def size_axis(ax: Any) -> None:
        ax.set_xscale("log")
        ax.set_xticks(sizes, [size_label(n) for n in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("products")

    def save(fig: Any, name: str) -> None:
        """Lay ``fig`` out and write it beside the JSON, as ``{stem}_{name}.png``."""
        fig.tight_layout()
        path = where / f"{stem}_{name}.png"
        fig.savefig(path)
        written.append(str(path))

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    try:
        for j, e in enumerate(embedders):
            rs = series(e)
            for i, stage in enumerate(BUILD_STAGES):
                ys = [r["build"]["seconds"].get(stage, math.nan) for r in rs]
                ax.plot([r["docs"] for r in rs], ys, styles[j % 4], marker="osD^"[j % 4], color=f"C{i}",
                        label=f"{STAGE_LABELS[stage]} ({e})")  # fmt: skip
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel("seconds")
        ax.set_title("Index build time per stage")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        save(fig, "build")
    finally:
        plt.close(fig)

    names = list(results["candidates"])

    def candidate_curves(ax: Any, value: Callable[[Mapping[str, Any]], Any]) -> None:
        """A line per embedder and candidate: ``value`` of the candidate's measures against the size, where
        it has one."""
        for j, e in enumerate(embedders):
            for i, name in enumerate(names):
                pts = [
                    (r["docs"], value(r["candidates"][name])) for r in series(e) if name in r["candidates"]
                ]
                pts = [(x, y) for x, y in pts if y is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), styles[j % 4], marker="osD^"[j % 4], color=f"C{i}",
                            label=f"{results['candidates'][name]['label']} ({e})")  # fmt: skip

    fig, axes = plt.subplots(1, len(LEVELS), figsize=(10, 3.6), dpi=110, sharey=True)
    try:
        for ax, lv in zip(axes, LEVELS, strict=True):
            candidate_curves(ax, functools.partial(_p50_ms, lv))
            ax.axhline(GOAL_P50_MS, color="grey", lw=0.8, ls="--")
            size_axis(ax)
            ax.set_title(f"{lv} p50")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("ms (cold caches)")
        axes[-1].legend(fontsize=6)
        save(fig, "latency")
    finally:
        plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    try:
        for ax, key, title in ((axes[0], "empty_share", "share of programs returning nothing"),
                               (axes[1], "p_at_1", "P@1 (first result satisfies the request)")):  # fmt: skip
            candidate_curves(ax, operator.itemgetter(key))
            size_axis(ax)
            ax.set_ylim(0, 1)
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[1].legend(fontsize=6)
        save(fig, "quality")
    finally:
        plt.close(fig)
    return written


def _p50_ms(level: str, measures: Mapping[str, Any]) -> Any:
    """A candidate's p50 at ``level`` (None where it has none)."""
    return measures["latency"].get(level, {}).get("p50_ms")
