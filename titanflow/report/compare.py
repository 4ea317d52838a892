"""Two runs side by side (titanflow.record.run_compare) as tables, a PNG, terminal text and Prefect artifacts.

    png = write_comparison_png(comparison, default_png(comparison))   # runs/<B>/compare-<A>.png
    print(comparison_text(comparison))                                 # titanflow compare A B
    publish_comparison(comparison, png)                                # <key>-compare, <key>-compare-steps
    compare_with_last_pass(run_id)          # the nightly's: a failed run against the last passing comparable one

The tables are built once (:func:`comparison_tables`, pandas) and rendered three ways: the terminal
(``DataFrame.to_string``), a markdown artifact (``<scenario>-<target>-<init>-compare``, the PNG
inlined) and a table artifact of the steps (``<key>-compare-steps``), keyed by run B, the run
under scrutiny, so the UI keeps one version per comparison.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from titanflow.record import history, run_compare
from titanflow.record.run_compare import RunComparison
from titanflow.report.artifacts import artifact_key, png_markdown, table_rows
from titanflow.report.markdown import markdown_table
from titanflow.report.plots import write_pair_curves


def _loss(value: float | None) -> str:
    return "" if value is None else f"{value:.5f}"


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.5f}"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _change(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:+.1%}"


def comparison_tables(c: RunComparison) -> dict[str, pd.DataFrame]:
    """{"steps", "metrics", "differences"}: the curves step by step (A, B, B - A in nats, parted),
    the metrics and task times (A, B, change), the parameters and provenance that differ; cells as text."""
    steps = pd.DataFrame([{"step": p.step, "loss A": _loss(p.loss_a), "loss B": _loss(p.loss_b),
                           "B - A": _signed(p.difference),
                           "parted": {True: "yes", False: "", None: "-"}[p.parted]} for p in c.steps],
                         columns=["step", "loss A", "loss B", "B - A", "parted"])
    metrics = pd.DataFrame([{"metric": m.metric, "A": _number(m.a), "B": _number(m.b), "change": _change(m.change)}
                            for m in c.metrics], columns=["metric", "A", "B", "change"])
    differ = pd.DataFrame([{"kind": kind, "name": d.name, "A": "" if d.a is None else str(d.a),
                            "B": "" if d.b is None else str(d.b)}
                           for kind, found in (("parameter", c.parameters), ("provenance", c.provenance))
                           for d in found], columns=["kind", "name", "A", "B"])
    return {"steps": steps, "metrics": metrics, "differences": differ}


def _preamble(c: RunComparison) -> list[str]:
    lines = [c.environment_line(), f"A: {c.run_a} ({c.verdict_a}; {c.source_a}: {c.run_dir_a})",
             (f"B: {c.run_b} ({c.verdict_b}{', ' + c.failure_class_b if c.failure_class_b else ''}; "
              f"{c.source_b}: {c.run_dir_b})")]
    if not c.comparable:
        lines.append(f"not comparable: A is {c.workload_a}, B is {c.workload_b} (another workload)")
    return lines


def comparison_text(c: RunComparison, png: Path | None = None) -> str:
    """The comparison for a terminal: headline, both runs, then each table (``DataFrame.to_string``)."""
    tables = comparison_tables(c)
    parts = [c.headline(), *_preamble(c), "", "loss per step (nats):", tables["steps"].to_string(index=False),
             "", "metrics and task times:", tables["metrics"].to_string(index=False), ""]
    parts += (["what differs:", tables["differences"].to_string(index=False)] if len(tables["differences"])
              else ["what differs: nothing (same parameters and versions)"])
    if png is not None:
        parts += ["", f"plot: {png}"]
    return "\n".join(parts) + "\n"


def comparison_markdown(c: RunComparison, png: Path | None = None) -> str:
    """The comparison as the markdown artifact: headline, both runs, the plot inlined, then each table."""
    tables = comparison_tables(c)
    lines = [f"# {c.run_b} against {c.run_a}", "", c.headline(), "", *[f"- {line}" for line in _preamble(c)]]
    if png is not None:
        lines += ["", png_markdown(png, f"loss per step of {c.run_a} and {c.run_b}"), "", f"`{png}`"]
    for title, name in (("Loss per step (nats)", "steps"), ("Metrics and task times", "metrics"),
                        ("What differs", "differences")):
        rows = tables[name].to_dict(orient="records")
        lines += ["", f"## {title}", "", markdown_table(rows) if rows else "nothing"]
    return "\n".join(lines) + "\n"


def default_png(c: RunComparison) -> Path:
    """``<run B's folder>/compare-<run A>.png``; in the working directory when B's folder is gone."""
    folder = Path(c.run_dir_b)
    return (folder if folder.is_dir() else Path.cwd()) / f"compare-{c.run_a}.png"


def write_comparison_png(c: RunComparison, path: Path) -> Path | None:
    """Both curves and their difference (titanflow.report.plots.pair_figure) at ``path``; None when
    neither run logged a step."""
    losses_a = [p.loss_a for p in c.steps if p.loss_a is not None]
    losses_b = [p.loss_b for p in c.steps if p.loss_b is not None]
    if not losses_a and not losses_b:
        return None
    return write_pair_curves(Path(path), losses_a, losses_b, labels=(c.run_a, c.run_b), margin=c.margin,
                             divergence_step=c.divergence_step, title=f"B {c.run_b} against A {c.run_a}")


def publish_comparison(c: RunComparison, png: Path | None) -> str:
    """Publish the markdown artifact ``<key>-compare`` and the table artifact ``<key>-compare-steps``
    (key: run B's ``<scenario>-<target>-<init>``, titanflow.report.artifacts.artifact_key); returns the key."""
    key = f"{artifact_key(c.model_dump())}-compare"
    create_markdown_artifact(key=key, markdown=comparison_markdown(c, png), description=c.headline())
    create_table_artifact(key=f"{key}-steps", description=f"loss per step (nats) of {c.run_b} against {c.run_a}",
                          table=table_rows({"step": p.step, "loss_a": p.loss_a, "loss_b": p.loss_b,
                                            "difference": p.difference, "parted": p.parted} for p in c.steps))
    return key


def compare_with_last_pass(run_id: str, history_dir: Path | str | None = None) -> RunComparison | None:
    """The run ``run_id`` (a run_id of the history, else its run folder) against the last passing
    comparable run before it (titanflow.record.run_compare.last_passing): the PNG written into its run
    folder and both artifacts published (:func:`publish_comparison`). None when there is no such run.

    Raises:
        LookupError: ``run_id`` is neither in the history nor a run folder.
        titanflow.record.run_compare.NoCurveError: either run logged no loss (nothing is written or published;
            the nightly logs it as a report that cannot be made).
        titanflow.record.history.HistoryError: the history table cannot be read.
    """
    runs = history.read_history(history_dir=history_dir)
    failed = run_compare.find_run(run_id, runs)
    good = run_compare.last_passing(failed, runs)
    if good is None:
        return None
    comparison = run_compare.compare(good, failed)
    png = write_comparison_png(comparison, default_png(comparison))
    publish_comparison(comparison, png)
    return comparison
