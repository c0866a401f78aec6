"""Bar charts with bootstrap error bars (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import require
from rl.eval.metrics import METRIC_LABELS

# (mean, low, high) of one bar; NaN when the group is empty.
Bar = tuple[float, float, float]


def _pyplot() -> Any:
    matplotlib: Any = require("matplotlib", "eval")
    matplotlib.use("Agg", force=True)
    return require("matplotlib.pyplot", "eval")


def grouped_bars(
    path: Path,
    *,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[Bar]],
    ylabel: str = "score",
) -> Path:
    """Write a PNG of bars grouped by ``groups``, one colour per series, with CI error bars.

    ``series`` maps a label to one (mean, low, high) per group.
    """
    plt = _pyplot()
    import numpy as np

    n_series = max(len(series), 1)
    width = 0.8 / n_series
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(groups) * max(1.0, n_series / 3)) + 1.6, 3.6), dpi=110)
    try:
        for i, (label, bars) in enumerate(series.items()):
            means = np.array([b[0] for b in bars], dtype=float)
            lows = np.array([b[1] for b in bars], dtype=float)
            highs = np.array([b[2] for b in bars], dtype=float)
            err = np.vstack([np.clip(means - lows, 0, None), np.clip(highs - means, 0, None)])
            ax.bar(
                x + (i - (n_series - 1) / 2) * width,
                np.nan_to_num(means),
                width,
                yerr=np.nan_to_num(err),
                capsize=2,
                label=label,
            )
        ax.set_xticks(x, list(groups))
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        # Outside the axes, so no bar near 1.0 is hidden behind it.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name)
