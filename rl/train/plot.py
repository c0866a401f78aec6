"""Training curves to PNG from the runs' ``metrics.jsonl``: one panel per quantity, one line per run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rl.errors import TrainError
from rl.train.logs import iter_steps, read_metrics

PANELS: tuple[tuple[str, str], ...] = (
    ("loss", "training loss"),
    ("eval_loss", "validation loss"),
    ("reward", "reward R (0-4)"),
    ("rewards/format/mean", "S_f (format)"),
    ("rewards/execution/mean", "execution rate (S_f·S_e)"),
    ("rewards/accuracy/mean", "accuracy layer (S_f·S_e·S_r)"),
    ("rewards/length/mean", "length layer"),
    ("completions/mean_length", "completion length (tokens)"),
    ("kl", "KL to the reference"),
    ("clip_ratio/region_mean", "clipped fraction"),
)
"""(log key, title) of every panel drawn when some run logged it."""


def plot_runs(runs: Sequence[Path], out: Path | None = None) -> Path:
    """Draw the curves of ``runs`` into ``out`` (default ``<first run>/curves.png``); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    records = {run: read_metrics(run) for run in runs}
    if not any(records.values()):
        raise TrainError(f"no metrics.jsonl with records in {', '.join(map(str, runs))}", code="train_plot")
    panels = [
        (key, title)
        for key, title in PANELS
        if any(any(True for _ in iter_steps(r, key)) for r in records.values())
    ]
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.0 * rows), squeeze=False)
    # One colour per run across every panel (a panel's own colour cycle would give the first run that logged
    # its key the first colour, so an RL run would wear the SFT run's colour where SFT logs nothing).
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {run: palette[i % len(palette)] for i, run in enumerate(records)}
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for run, recs in records.items():
            pts = list(iter_steps(recs, key))
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], linewidth=1.2, color=colours[run])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    # The legend names every run, whichever panels it appears in.
    handles = [Line2D([], [], color=colours[run], label=run.name) for run in records]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path = out or runs[0] / "curves.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
