"""The trend table (titanflow.judge.trends) as small plots in one PNG, markdown, terminal text and
the Prefect artifact ``trends-<target>``.

    png = write_trends_png(table, history_root() / "_trends-cpu.png")
    publish_trends("cpu", table, png, 14)
    nightly_trends("cpu", run_ids)           # after each nightly (tasks/trends.py): table, PNG, artifact
    print(trend_text(table))                 # titanflow history --last 20

The PNG has one row of small plots per scenario x init (and workload), one column per trend metric,
nights along x: a red dot where that night's run regressed on that metric (a history_median rule out
of margin), a red dotted line on a night a run failed (grey: whose last run was cancelled). Drawn with matplotlib's
object API on the Agg canvas, as titanflow.report.plots. Tables mark a regressed value with ``*``
(terminal) or in bold (markdown), and list every mark of the night in ``regressions``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.dates as mdates
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from prefect.artifacts import create_markdown_artifact

from titanflow.judge.environment import stack_difference
from titanflow.judge.trends import DEFAULT_NIGHTS, TREND_METRICS, trend_table
from titanflow.record import history
from titanflow.record.summary import recorded_stack
from titanflow.report.artifacts import png_markdown
from titanflow.report.markdown import markdown_table

#: One small plot: width and height in inches; resolution. 5 metrics x 6 scenario x init at 80 dpi
#: is 920 x 740 px, about 100 kB as PNG, small enough to inline in the markdown artifact.
CELL_IN = (2.3, 1.45)
DPI = 80

#: Short column titles of the text tables.
SHORT = {"first_step_loss": "first loss", "final_loss": "final loss", "tokens_per_s": "tokens/s",
         "peak_memory_gib": "peak GiB", "total_s": "total s"}


def _groups(table: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    return list(table.groupby(["target", "scenario", "init", "workload"], sort=False))


def trends_figure(table: pd.DataFrame, title: str = "") -> Figure:
    """The small plots of ``table`` (titanflow.judge.trends.trend_table; module docstring).

    Raises:
        ValueError: ``table`` has no row (no night to plot).
    """
    if table.empty:
        raise ValueError("table is empty: the history has no run of these scenarios, nothing to plot")
    groups = _groups(table)
    several_workloads = table.groupby(["target", "scenario", "init"]).workload.nunique().max() > 1
    fig = Figure(figsize=(CELL_IN[0] * len(TREND_METRICS), CELL_IN[1] * len(groups) + 0.7), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(groups), len(TREND_METRICS), squeeze=False, sharex="row")
    for row, ((target, scenario, init, workload), group) in enumerate(groups):
        nights = pd.to_datetime(group.night)
        for col, (metric, label) in enumerate(TREND_METRICS.items()):
            ax = axes[row][col]
            ax.plot(nights, group[metric].astype(float), color="tab:blue", linewidth=1, marker="o", markersize=2.5)
            marked = group.regressed.map(lambda columns, m=metric: m in columns).to_numpy()
            if marked.any():
                ax.scatter(nights[marked], group[metric][marked].astype(float), color="tab:red", s=22, zorder=3)
            for night, failed, verdict in zip(nights, group.failed_runs, group.verdict):
                if failed or verdict == "cancelled":
                    ax.axvline(night, color="tab:red" if failed else "0.6", linestyle=":", linewidth=1.2)
            if row == 0:
                ax.set_title(label, fontsize=8)
            if col == 0:
                name = f"{scenario} / {init}" + (f"\n{workload}" if several_workloads else "")
                ax.set_ylabel(name, fontsize=8)
            ax.tick_params(labelsize=6)
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=2, maxticks=4))
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))
            ax.grid(alpha=0.3)
    handles = [Line2D([], [], color="tab:red", marker="o", linestyle="", label="regression (out of margin)"),
               Line2D([], [], color="tab:red", linestyle=":", label="a run of the night failed"),
               Line2D([], [], color="0.6", linestyle=":", label="cancelled")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


def write_trends_png(table: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Draw :func:`trends_figure` and save it as PNG at ``path``; returns ``path``."""
    trends_figure(table, title).savefig(path, format="png")
    return path


def display_rows(table: pd.DataFrame, mark: str) -> list[dict]:
    """``table`` as rows of text for a report: values rounded (losses to 4 decimals, the rest to 4
    significant digits), each regressed value marked by ``mark`` (``"*{}"`` style: ``{}`` is the value)."""
    rows = []
    for _, r in table.iterrows():
        cells = {"scenario": r.scenario, "init": r.init, "workload": r.workload, "night": str(r.night),
                 "run": r.run_id + (f" (+{r.runs - 1})" if r.runs > 1 else ""), "verdict": r.verdict}
        for metric in TREND_METRICS:
            value = r[metric]
            text = "" if value is None or pd.isna(value) else (
                f"{value:.4f}" if metric.endswith("loss") else f"{value:.4g}")
            cells[SHORT[metric]] = mark.format(text) if metric in r.regressed and text else text
        cells["regressions"] = r.regressions
        if (table["stack"] != "").any():  # only where a night's installed stack changed
            cells["stack"] = r["stack"]
        rows.append(cells)
    return rows


def name_stack_changes(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``table`` (titanflow.judge.trends.trend_table of ``runs``, the history) with each night's ``stack`` mark
    naming the packages that differ from the night before (titanflow.judge.environment.stack_difference of both runs'
    summary.json stacks); a mark whose runs' summaries are gone keeps the two digests."""
    named = table.copy()
    for index, row in table[table["stack"] != ""].iterrows():
        stacks = [_recorded_stack(runs, run_id) for run_id in (row.stack_changed_from, row.run_id)]
        changed = stack_difference(*stacks)
        if changed:
            named.at[index, "stack"] = (f"{len(changed)} package(s) changed: {', '.join(changed[:5])}"
                                        + (", ..." if len(changed) > 5 else ""))
    return named


def _recorded_stack(runs: pd.DataFrame, run_id: str) -> dict | None:
    """The installed stack run ``run_id``'s summary.json recorded (its history row's run folder); None if gone."""
    rows = runs[runs.run_id == run_id]
    return recorded_stack(rows.iloc[-1].run_dir) if not rows.empty else None


def trend_text(table: pd.DataFrame) -> str:
    """The table for a terminal (pandas ``to_string``), a regressed value followed by ``*``."""
    if table.empty:
        return "no runs in the history for these nights\n"
    text = pd.DataFrame(display_rows(table, "{}*")).to_string(index=False)
    return f"{text}\n* out of margin (regression rules); regressions: every mark of the night\n"


def trends_markdown(target: str, table: pd.DataFrame, png: Path | None, nights: int) -> str:
    """The ``trends-<target>`` artifact's markdown: the PNG inlined, then the table (regressed values in bold)."""
    lines = [f"# trends on {target}: the last {nights} nights", ""]
    if table.empty:
        return "\n".join(lines + ["No run of this target in the history yet."]) + "\n"
    marked = table[table.regressions != ""]
    lines += [(f"{table.night.nunique()} nights, {len(_groups(table))} scenario x init; {len(marked)} night(s) "
               "with a regression or a failure marked."), ""]
    if png is not None:
        lines += [png_markdown(png, f"trends on {target}"), "", f"`{png}`", ""]
    lines += [markdown_table(display_rows(table, "**{}**"))]
    return "\n".join(lines) + "\n"


def publish_trends(target: str, table: pd.DataFrame, png: Path | None, nights: int) -> str:
    """Publish :func:`trends_markdown` as the markdown artifact ``trends-<target>``; returns the key."""
    key = f"trends-{target}"
    create_markdown_artifact(key=key, markdown=trends_markdown(target, table, png, nights),
                             description=f"the last {nights} nights on {target}, regressions marked")
    return key


def nightly_trends(target: str, run_ids: list[str], nights: int = DEFAULT_NIGHTS,
                   history_dir: Path | str | None = None) -> Path | None:
    """After a nightly: the trend table of ``target`` over the workloads of the nightly's runs ``run_ids``
    (every workload of the target when none of them is in the history), its PNG written beside the
    history table (``_trends-<target>.png``: the leading underscore keeps ``pandas.read_parquet`` of the history
    folder reading the table alone, as pyarrow skips such files) and the artifact ``trends-<target>`` published; returns the
    PNG, or None when the history has no run of the target (the artifact says so).

    Raises:
        titanflow.record.history.HistoryError: the history table cannot be read.
    """
    runs = history.read_history(history_dir=history_dir)
    tonight = runs[runs.run_id.isin(run_ids)] if not runs.empty else runs
    workloads = sorted(set(tonight.config_key)) if not tonight.empty else None
    table = name_stack_changes(trend_table(runs, target=target, nights=nights, workloads=workloads), runs)
    png = None
    if not table.empty:
        folder = history.history_file(history_dir).parent
        folder.mkdir(parents=True, exist_ok=True)
        png = write_trends_png(table, folder / f"_trends-{target}.png", title=f"the last {nights} nights on {target}")
    publish_trends(target, table, png, nights)
    return png
