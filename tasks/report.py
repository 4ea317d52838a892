"""report: publish the run's summary as Prefect artifacts (keyed per scenario,
target and init, so the UI keeps their history).

- ``<key>-metrics``: table artifact of the per-step metrics;
- ``<key>-summary``: markdown with the verdict, both loss figures, validation
  and per-task timings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact


def artifact_key(summary: dict) -> str:
    """``<scenario>-<target>-<init>`` in the lowercase-and-dashes form Prefect keys require."""
    raw = f"{summary['scenario']}-{summary['target']}-{summary['init']}"
    return "".join(c if c.isalnum() else "-" for c in raw.lower())


def summary_markdown(summary: dict) -> str:
    """The run's summary as a short markdown report."""
    verdict = summary.get("verdict", "unknown").upper()
    lines = [f"# {summary['scenario']} on {summary['target']} ({summary['init']} init): {verdict}", ""]
    if "first_step_loss" in summary:
        lines += [f"- first-step loss **{summary['first_step_loss']:.4f}**, expected "
                  f"{summary['expected_first_step_loss']:.4f} +- {summary['tolerance']} "
                  f"({summary.get('expectation_source', '')})"]
    if summary.get("failed_task"):
        lines += [f"- failed task: `{summary['failed_task']}`: {summary.get('error', '')}"]
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
    lines += ["", "| task | seconds |", "|---|---|"]
    lines += [f"| {name} | {s:.1f} |" for name, s in summary.get("timings_s", {}).items()]
    return "\n".join(lines) + "\n"


@task(name="report")
def report(summary_path: str, metrics_path: str | None) -> None:
    """Prefect task: publish the summary (and metrics when training ran) as artifacts."""
    summary = json.loads(Path(summary_path).read_text())
    key = artifact_key(summary)
    if metrics_path and Path(metrics_path).is_file():
        table = pd.read_csv(metrics_path)
        create_table_artifact(key=f"{key}-metrics", table=table.to_dict(orient="records"),
                              description=f"per-step metrics of run {summary['run_id']}")
    create_markdown_artifact(key=f"{key}-summary", markdown=summary_markdown(summary),
                             description=f"verdict of run {summary['run_id']}")
