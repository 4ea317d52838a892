"""report: publish the run's summary as Prefect artifacts (keyed per scenario,
target and init, so the UI keeps their history; ``titanflow.artifacts``).

- ``<key>-metrics``: table artifact of the per-step metrics (the loss curve);
- ``<key>-summary``: markdown with the verdict, both loss figures, the reason of each
  failure, validation, per-task timings, the loss-curve plot (``runs/<id>/loss_curve.png``,
  inlined) and, for a failed run, the last lines of ``train.log``;
- ``<key>-baselines``: table of metrics against their baselines, when findings are given.

The golden curve, the last passing runs and the findings are optional inputs: the scenario
flow passes them from its comparison with the run history (tasks/history.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from titanflow.artifacts import artifact_key, findings_rows, png_markdown, publish_findings
from titanflow.metrics import strip_ansi
from titanflow.plots import Curve, write_loss_curve

#: Lines of train.log shown in a failed run's report.
LOG_TAIL_LINES = 40
#: The plot written into the run folder.
LOSS_CURVE = "loss_curve.png"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str | None:
    """Last ``lines`` lines of the log at ``path`` without colour codes, or None when there is no log."""
    if not path.is_file():
        return None
    with open(path, errors="replace") as log:
        return "\n".join(strip_ansi(line.rstrip("\n")) for line in log.readlines()[-lines:])


def fenced(text: str) -> str:
    """``text`` in a fenced code block whose fence is longer than any backtick run inside it
    (CommonMark), so a log line with backticks cannot end the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def summary_markdown(summary: dict, *, loss_curve: Path | None = None, log: str | None = None,
                     findings: list[dict[str, Any]] | None = None) -> str:
    """The run's summary as a short markdown report.

    ``loss_curve``: a PNG inlined under the summary; ``log``: the log tail shown (fenced) when
    the run failed; ``findings``: rows of ``titanflow.artifacts.findings_rows``, whose failures
    are listed with their class.
    """
    verdict = summary.get("verdict", "unknown").upper()
    lines = [f"# {summary['scenario']} on {summary['target']} ({summary['init']} init): {verdict}", ""]
    if "first_step_loss" in summary:
        lines += [f"- first-step loss **{summary['first_step_loss']:.4f}**, expected "
                  f"{summary['expected_first_step_loss']:.4f} +- {summary['tolerance']} "
                  f"({summary.get('expectation_source', '')})"]
    if summary.get("failed_task"):
        lines += [f"- failed task: `{summary['failed_task']}`: {summary.get('error', '')}"]
    if summary.get("reason"):
        lines += [f"- loss check ({summary.get('verdict', '')}): {summary['reason']}"]
    for row in findings or []:
        if row["passed"] is False:
            lines += [f"- out of margin ({row['class'] or 'unclassified'}): {row['metric']} {row['value']} "
                      f"against baseline {row['baseline']} (margin {row['margin']})"]
    if "validation" in summary:
        v = summary["validation"]
        lines += [f"- export {summary.get('export_dir')}: absent from files {v['missing_in_files']}, "
                  f"missing {v['missing']}, unexpected {v['unexpected']}, tied {v['tied']}"]
        if v.get("parity"):
            lines += [f"- parity with the trained model: KL {v['parity']['kl']:.3g}, "
                      f"top-1 {v['parity']['top1_agreement']:.4f}"]
        if v.get("round_trip"):
            lines += [f"- round trip HF -> torchtitan -> HF: {v['round_trip']['tensors']} tensors, "
                      f"{len(v['round_trip']['differing'])} differing"]
        lines += [f"- validation seconds: {v.get('seconds')}"]
    if "tokens_per_s" in summary:
        lines += [f"- {summary['tokens_per_s']:.0f} tokens/s, peak RSS {summary['peak_rss_bytes'] / 2**30:.2f} GiB"]
    if log is not None and verdict == "FAIL":  # before the timings and the plot: it says why
        lines += ["", f"## Last {len(log.splitlines())} lines of train.log", "", fenced(log)]
    lines += ["", "| task | seconds |", "|---|---|"]
    lines += [f"| {name} | {s:.1f} |" for name, s in summary.get("timings_s", {}).items()]
    if loss_curve is not None:
        lines += ["", "## Loss curve", "", png_markdown(loss_curve, f"loss per step, run {summary['run_id']}"),
                  "", f"`{loss_curve}`"]
    return "\n".join(lines) + "\n"


@task(name="report")
def report(summary_path: str, metrics_path: str | None, golden: Curve | None = None,
           history: Mapping[str, Curve] | None = None, findings: Iterable[Any] | None = None) -> None:
    """Prefect task: publish the summary, the per-step metrics and the loss-curve plot as artifacts.

    ``metrics_path`` defaults to ``metrics.csv`` beside the summary (a failed training keeps
    the steps that ran). ``golden`` ({step: loss} or losses from step 1) and ``history``
    ({run id: curve} of the last passing runs) are drawn with the run's loss; ``findings``
    (dicts or models with metric, value, baseline, margin, passed, class) become the
    ``<key>-baselines`` table.

    Raises:
        ValueError: a finding lacks a field (``titanflow.artifacts.as_findings``).
    """
    summary = json.loads(Path(summary_path).read_text())
    run_dir = Path(summary_path).parent
    key = artifact_key(summary)
    rows = findings_rows(findings) if findings is not None else None
    metrics = Path(metrics_path) if metrics_path else run_dir / "metrics.csv"
    loss_curve = None
    if metrics.is_file():
        table = pd.read_csv(metrics)
        if not table.empty:
            create_table_artifact(key=f"{key}-metrics", table=table.to_dict(orient="records"),
                                  description=f"per-step metrics of run {summary['run_id']}")
            loss_curve = write_loss_curve(run_dir / LOSS_CURVE, dict(zip(table.step, table.loss)), golden=golden,
                                          history=history, title=f"{summary['run_id']} ({summary.get('verdict', '')})")
    if rows is not None:
        publish_findings(rows, key, summary["run_id"])
    markdown = summary_markdown(summary, loss_curve=loss_curve, log=log_tail(run_dir / "train.log"), findings=rows)
    create_markdown_artifact(key=f"{key}-summary", markdown=markdown,
                             description=f"verdict of run {summary['run_id']}")
