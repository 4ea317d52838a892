"""Publish a run as Prefect artifacts, keyed per scenario, target and init so the UI keeps their
history (titanflow.report.artifacts):

- ``<key>-metrics``: table of the per-step metrics (the loss curve);
- ``<key>-summary``: the markdown of titanflow.report.markdown, the loss-curve plot
  (``runs/<id>/loss_curve.png``) inlined;
- ``<key>-baselines``: the regression findings against their baselines, when given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from prefect.artifacts import create_markdown_artifact

from titanflow.launch.metrics import log_tail
from titanflow.record.summary import read_summary
from titanflow.report.artifacts import artifact_key, publish_findings, publish_metrics
from titanflow.report.markdown import LOG_TAIL_LINES, summary_markdown
from titanflow.report.plots import Curve, write_loss_curve
from titanflow.results import Finding

#: The plot written into the run folder.
LOSS_CURVE = "loss_curve.png"


def publish_report(summary_path: Path, metrics_path: Path | None = None, golden: Curve | None = None,
                   history: Mapping[str, Curve] | None = None, findings: list[Finding] | None = None) -> Path | None:
    """Publish the run of ``summary_path`` (module docstring); returns the loss-curve PNG, or None
    when no step was logged.

    ``metrics_path`` defaults to ``metrics.csv`` beside the summary (a failed training keeps
    the steps that ran). ``golden`` ({step: loss} or losses from step 1) and ``history``
    ({run id: curve} of the last passing runs) are drawn with the run's loss.
    """
    summary = read_summary(summary_path)
    run_dir = Path(summary_path).parent
    key = artifact_key(summary.model_dump())
    metrics = Path(metrics_path) if metrics_path else run_dir / "metrics.csv"
    loss_curve = None
    if metrics.is_file():
        table = pd.read_csv(metrics)
        if not table.empty:
            publish_metrics(table, key, summary.run_id)
            loss_curve = write_loss_curve(run_dir / LOSS_CURVE, dict(zip(table.step, table.loss)), golden=golden,
                                          history=history, title=f"{summary.run_id} ({summary.verdict or ''})")
    if findings is not None:
        publish_findings(findings, key, summary.run_id)
    markdown = summary_markdown(summary, loss_curve=loss_curve, log=log_tail(run_dir / "train.log", LOG_TAIL_LINES),
                                findings=findings)
    create_markdown_artifact(key=f"{key}-summary", markdown=markdown, description=f"verdict of run {summary.run_id}")
    return loss_curve
