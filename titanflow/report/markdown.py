"""The run's summary as markdown: verdict, loss figures, failures with their class, a cancel with
where it happened, validation, timings, the loss-curve plot inlined and, for a failed or cancelled
run, the end of ``train.log``."""

from __future__ import annotations

import re
from pathlib import Path

from titanflow.judge.environment import describe
from titanflow.record.summary import RunSummary
from titanflow.report.artifacts import png_markdown
from titanflow.results import Finding

#: Lines of train.log shown in a failed run's report.
LOG_TAIL_LINES = 40


def fenced(text: str) -> str:
    """``text`` in a fenced code block whose fence is longer than any backtick run inside it
    (CommonMark), so a log line with backticks cannot end the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def markdown_table(rows: list[dict]) -> str:
    """``rows`` (one dict per row, the first row's keys as the header) as a GitHub markdown table; a
    ``|`` inside a cell is escaped. Written here because pandas' ``DataFrame.to_markdown`` needs
    tabulate, which titanflow does not otherwise depend on."""
    if not rows:
        return ""
    header = list(rows[0])

    def cell(value) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(row.get(k)) for k in header) + " |" for row in rows]
    return "\n".join(lines)


def summary_markdown(summary: RunSummary, *, loss_curve: Path | None = None, log: str | None = None,
                     findings: list[Finding] | None = None) -> str:
    """The run's summary as a short markdown report.

    ``loss_curve``: a PNG inlined under the summary; ``log``: the log tail shown (fenced) when
    the run failed or was cancelled; ``findings``: the regression findings, whose failures are listed with their class.
    """
    verdict = (summary.verdict or "unknown").upper()
    lines = [f"# {summary.scenario} on {summary.target} ({summary.init} init): {verdict}", ""]
    if summary.loss:
        loss = summary.loss
        lines += [f"- first-step loss **{loss.first_step_loss:.4f}**, expected "
                  f"{loss.expected_first_step_loss:.4f} +- {loss.tolerance} ({loss.expectation_source})"]
    if summary.first_non_finite_step is not None:
        lines += [f"- **loss not finite from step {summary.first_non_finite_step}**"]
    if summary.environment:
        checkpoint = f"; checkpoint {summary.weights_digest}" if summary.weights_digest else ""
        lines += [f"- numerics: {describe(summary.environment)}{checkpoint}"]
    if summary.failed_task:
        lines += [f"- failed task: `{summary.failed_task}`: {summary.error or ''}"]
    if summary.cancelled:
        cancel = summary.cancelled
        where = f"in task `{cancel.task}`" if cancel.task else "between tasks"
        lines += [(f"- **cancelled** {where} after {len(cancel.losses)} logged step(s) of {summary.steps}: "
                   f"{cancel.cause}; not a failure, no failure class")]
    if summary.reason and not summary.cancelled:
        lines += [f"- loss check ({summary.verdict or ''}): {summary.reason}"]
    if summary.history_error:
        lines += [f"- **history not recorded**: {summary.history_error}"]
    for finding in findings or []:
        if finding.passed is False:
            streak = f", {finding.streak} consecutive runs: {finding.status}" if finding.streak else ""
            lines += [f"- out of margin ({finding.finding_class or 'unclassified'}{streak}): {finding.metric} "
                      f"{finding.value} against baseline {finding.baseline} (margin {finding.margin})"]
        elif finding.metric == "losses" and finding.status != "no value":  # exact or banded: always said
            lines += [f"- loss curve vs golden ({finding.status}): {finding.detail}"]
    if summary.validation:
        v, load = summary.validation, summary.validation.load
        lines += [f"- export {summary.export.export_dir if summary.export else None}: absent from files "
                  f"{load.missing_in_files}, missing {load.missing}, unexpected {load.unexpected}, tied {load.tied}"]
        if v.parity:
            lines += [f"- parity with the trained model: KL {v.parity.kl:.3g}, top-1 {v.parity.top1_agreement:.4f}"]
        if v.round_trip:
            lines += [f"- round trip HF -> torchtitan -> HF: {v.round_trip.tensors} tensors, "
                      f"{len(v.round_trip.differing)} differing"]
        lines += [f"- validation seconds: {v.seconds}"]
    if summary.train:
        lines += [f"- {summary.train.tokens_per_s:.0f} tokens/s, peak RSS "
                  f"{summary.train.peak_rss_bytes / 2**30:.2f} GiB"]
    if log is not None and verdict in ("FAIL", "CANCELLED"):  # before the timings and the plot: it says why
        lines += ["", f"## Last {len(log.splitlines())} lines of train.log", "", fenced(log)]
    peaks = summary.task_peak_rss_bytes  # the flow process's, per task (titanflow.run.peak_rss)
    lines += ["", "| task | seconds | flow process peak RSS (GiB) |", "|---|---|---|"]
    lines += [f"| {name} | {s:.1f} | {f'{peaks[name] / 2**30:.2f}' if name in peaks else '-'} |"
              for name, s in summary.timings_s.items()]
    if loss_curve is not None:
        lines += ["", "## Loss curve", "", png_markdown(loss_curve, f"loss per step, run {summary.run_id}"),
                  "", f"`{loss_curve}`"]
    return "\n".join(lines) + "\n"
