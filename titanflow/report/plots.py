"""Loss-curve plots: a run's per-step loss against the golden curve and the last passing runs, and
two runs against each other with their difference.

    write_loss_curve(run_dir / "loss_curve.png", losses, golden=read_curve(path).losses, history={"run-a": [...]})
    write_pair_curves(path, losses_a, losses_b, labels=("run-a", "run-b"), margin=0.02, divergence_step=3)

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

from titanflow.results import non_finite_steps

#: Figure size in inches and resolution: 6.4 x 3.6 in at 100 dpi = 640 x 360 px.
FIGSIZE_IN = (6.4, 3.6)
DPI = 100

#: A curve: losses with step 1 first, or {step: loss} (``titanflow.judge.goldens.GoldenCurve.losses``).
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


def non_finite_steps_of(curve: Curve) -> list[int]:
    """Steps of ``curve`` (numbered as :func:`curve_points` numbers them, so a curve logged every few
    steps keeps its step numbers) whose loss is NaN or infinite (titanflow.results.non_finite_steps)."""
    steps, values = curve_points(curve)
    return [steps[i - 1] for i in non_finite_steps(values)]


def non_finite_label(steps: Sequence[int]) -> str:
    """Legend entry of the non-finite marker: ``non-finite at step N`` (``N`` the first), with the count
    when there are more."""
    return f"non-finite at step {steps[0]}" + (f" ({len(steps)} steps)" if len(steps) > 1 else "")


def _finite_points(curve: Curve) -> tuple[list[int], list[float]]:
    """:func:`curve_points` with each non-finite loss as NaN, which matplotlib leaves as a gap (an inf
    would be drawn off the axes or stretch the autoscaled limits)."""
    steps, values = curve_points(curve)
    return steps, [v if math.isfinite(v) else math.nan for v in values]


def loss_curve_figure(losses: Curve, *, golden: Curve | None = None,
                      history: Mapping[str, Curve] | None = None, title: str = "") -> Figure:
    """Figure with one axes: the run's loss (nats) per step, the golden curve (dashed) and
    each past passing run (thin grey; one legend entry for all of them).

    Lines, in drawing order: history runs, golden, the non-finite marker, this run (on top).
    Only finite losses are drawn (a non-finite one is a gap). When the run has non-finite losses,
    a red dotted vertical line marks the first such step, with the legend entry of
    :func:`non_finite_label`, and a red x at the foot of the axes marks each of them.

    Raises:
        ValueError: ``losses`` is empty (nothing to plot).
    """
    steps, values = _finite_points(losses)
    if not steps:
        raise ValueError("losses is empty: the run logged no training step, there is no curve to plot")
    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    history = history or {}
    for i, curve in enumerate(history.values()):
        ax.plot(*_finite_points(curve), color="0.6", linewidth=1, alpha=0.8,
                label=f"last {len(history)} passing runs" if i == 0 else "_nolegend_")
    if golden is not None:
        ax.plot(*_finite_points(golden), color="black", linestyle="--", linewidth=1.5, label="golden")
    bad = non_finite_steps_of(losses)
    if bad:
        ax.axvline(bad[0], color="tab:red", linestyle=":", linewidth=1.5, label=non_finite_label(bad))
        # x in data, y in axes fraction: the marks sit at the foot whatever the loss range
        ax.scatter(bad, [0.03] * len(bad), transform=ax.get_xaxis_transform(), marker="x", color="tab:red",
                   s=20, label="_nolegend_")
    ax.plot(steps, values, color="tab:blue", linewidth=2, marker="o" if len(steps) <= 30 else None,
            markersize=3, label="this run")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if len(steps) <= 20:
        ax.set_xticks(range(1, max(steps) + 1))
    ax.legend(fontsize=8, loc="upper right")
    return fig


def write_loss_curve(path: Path, losses: Curve, *, golden: Curve | None = None,
                     history: Mapping[str, Curve] | None = None, title: str = "") -> Path:
    """Draw :func:`loss_curve_figure` and save it as PNG at ``path``; returns ``path``."""
    fig = loss_curve_figure(losses, golden=golden, history=history, title=title)
    fig.savefig(path, format="png")
    return path


def pair_figure(losses_a: Curve, losses_b: Curve, *, labels: tuple[str, str], margin: float,
                divergence_step: int | None = None, title: str = "") -> Figure:
    """Figure of two runs (titanflow.record.run_compare): on top both losses (nats) per step, A grey and
    B blue; below, B - A per step (nats) with the band +-``margin`` shaded. A red dotted vertical line
    on both marks ``divergence_step``, the first step where they part by more than ``margin``.
    Non-finite losses are gaps, as in :func:`loss_curve_figure`. 6.4 x 4.8 in at :data:`DPI`.

    Raises:
        ValueError: both curves are empty (nothing to plot).
    """
    steps_a, values_a = _finite_points(losses_a)
    steps_b, values_b = _finite_points(losses_b)
    if not steps_a and not steps_b:
        raise ValueError("losses_a and losses_b are empty: neither run logged a training step")
    fig = Figure(figsize=(FIGSIZE_IN[0], 4.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    marker = "o" if max(len(steps_a), len(steps_b)) <= 30 else None
    top.plot(steps_a, values_a, color="0.45", linewidth=2, marker=marker, markersize=3, label=f"A {labels[0]}")
    top.plot(steps_b, values_b, color="tab:blue", linewidth=1.5, marker=marker, markersize=3, label=f"B {labels[1]}")
    b_of = dict(zip(steps_b, values_b))
    shared = [s for s in steps_a if s in b_of]
    a_of = dict(zip(steps_a, values_a))
    bottom.axhspan(-margin, margin, color="0.85", label=f"+-{margin} nats")
    bottom.axhline(0, color="0.45", linewidth=1)
    bottom.plot(shared, [b_of[s] - a_of[s] for s in shared], color="tab:blue", marker=marker, markersize=3,
                label="B - A")
    for ax in (top, bottom):
        if divergence_step is not None:
            ax.axvline(divergence_step, color="tab:red", linestyle=":", linewidth=1.5,
                       label=f"part at step {divergence_step}" if ax is top else "_nolegend_")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    top.set_ylabel("loss (nats)")
    bottom.set_ylabel("B - A (nats)")
    bottom.set_xlabel("step")
    last = max(steps_a + steps_b)
    if last <= 20:
        bottom.set_xticks(range(1, last + 1))
    top.set_title(title, fontsize=9)
    return fig


def write_pair_curves(path: Path, losses_a: Curve, losses_b: Curve, *, labels: tuple[str, str], margin: float,
                      divergence_step: int | None = None, title: str = "") -> Path:
    """Draw :func:`pair_figure` and save it as PNG at ``path``; returns ``path``."""
    pair_figure(losses_a, losses_b, labels=labels, margin=margin, divergence_step=divergence_step,
                title=title).savefig(path, format="png")
    return path
