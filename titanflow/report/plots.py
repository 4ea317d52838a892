"""Loss-curve plot of a run: its per-step loss against the golden curve and the last passing runs.

    write_loss_curve(run_dir / "loss_curve.png", losses, golden=read_curve(path)[0], history={"run-a": [...]})

Drawn with matplotlib's object API on the Agg canvas (no pyplot, so no global backend
state and no display needed). The figure is small (640 x 360 px, 100 dpi; about 25-40 kB
as PNG) so the report can embed it in a markdown artifact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Figure size in inches and resolution: 6.4 x 3.6 in at 100 dpi = 640 x 360 px.
FIGSIZE_IN = (6.4, 3.6)
DPI = 100

#: A curve: losses with step 1 first, or {step: loss} (the form ``titanflow.judge.goldens.read_curve`` returns first).
Curve = Sequence[float] | Mapping[int, float]


def curve_points(curve: Curve) -> tuple[list[int], list[float]]:
    """(steps, losses) of ``curve``, sorted by step; a sequence's first value is step 1.

    Raises:
        ValueError: a step below 1 (steps are 1-based, as torchtitan logs them).
    """
    pairs = sorted((int(s), float(v)) for s, v in curve.items()) if isinstance(curve, Mapping) \
        else [(step, float(v)) for step, v in enumerate(curve, 1)]
    if pairs and pairs[0][0] < 1:
        raise ValueError(f"curve step {pairs[0][0]} is below 1: steps are 1-based")
    return [s for s, _ in pairs], [v for _, v in pairs]


def loss_curve_figure(losses: Curve, *, golden: Curve | None = None,
                      history: Mapping[str, Curve] | None = None, title: str = "") -> Figure:
    """Figure with one axes: the run's loss (nats) per step, the golden curve (dashed) and
    each past passing run (thin grey; one legend entry for all of them).

    Lines, in drawing order: history runs, golden, this run (on top). Non-finite losses
    are left as gaps (matplotlib skips NaN).

    Raises:
        ValueError: ``losses`` is empty (nothing to plot).
    """
    steps, values = curve_points(losses)
    if not steps:
        raise ValueError("losses is empty: the run logged no training step, there is no curve to plot")
    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    history = history or {}
    for i, curve in enumerate(history.values()):
        ax.plot(*curve_points(curve), color="0.6", linewidth=1, alpha=0.8,
                label=f"last {len(history)} passing runs" if i == 0 else "_nolegend_")
    if golden is not None:
        ax.plot(*curve_points(golden), color="black", linestyle="--", linewidth=1.5, label="golden")
    ax.plot(steps, values, color="tab:blue", linewidth=2, marker="o" if len(steps) <= 30 else None,
            markersize=3, label="this run")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if len(steps) <= 20:
        ax.set_xticks(range(1, max(steps) + 1))
    if not all(map(math.isfinite, values)):
        ax.text(0.01, 0.02, "non-finite loss at some step (gap in the curve)", transform=ax.transAxes,
                color="tab:red", fontsize=8)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def write_loss_curve(path: Path, losses: Curve, *, golden: Curve | None = None,
                     history: Mapping[str, Curve] | None = None, title: str = "") -> Path:
    """Draw :func:`loss_curve_figure` and save it as PNG at ``path``; returns ``path``."""
    fig = loss_curve_figure(losses, golden=golden, history=history, title=title)
    fig.savefig(path, format="png")
    return path
