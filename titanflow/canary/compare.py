"""The canary's record and report: the packages that differ between the two sides' venvs, then each scenario's
verdict, first-step and final loss and speed on the pinned profile beside its successor.

    result = CanaryResult(canary_id=..., folder=..., target="cpu", pinned=pinned, successor=successor,
                          packages=stack_difference(pinned_stack, successor_stack), runs=[...])
    canary_markdown(result)   # the artifact canary-<profile> and <folder>/canary.md

The figures are each run's summary.json's (titanflow.record.summary: ``train.losses``, ``train.tokens_per_s``,
``train.peak_memory_gib``, ``timings_s["train"]``); a run without a summary shows why instead.
"""

from __future__ import annotations

import datetime

from pydantic import BaseModel, Field

from titanflow.canary.side_run import SideRun
from titanflow.successor import CanarySide


class SideFigures(BaseModel):
    """One side's figures of one scenario run (None where its summary has none)."""

    verdict: str | None = Field(description="pass | fail | cancelled; None: the run wrote no summary")
    first_loss: float | None = Field(None, description="step 1's loss, nats")
    final_loss: float | None = Field(None, description="the last step's loss, nats")
    tokens_per_s: float | None = Field(None, description="all ranks, median over steps >= 2 (TrainResult)")
    peak_memory_gib: float | None = Field(None, description="largest per-rank peak memory torchtitan reported")
    train_s: float | None = Field(None, description="wall seconds of the train task")
    run_dir: str
    why: str | None = Field(None, description="a failed run's reason, or why there is no summary")


def figures(run: SideRun) -> SideFigures:
    """:class:`SideFigures` of ``run`` from its summary."""
    summary = run.summary
    if summary is None:
        return SideFigures(verdict=None, run_dir=run.run_dir, why=run.why)
    train = summary.train
    losses = train.losses if train else []
    return SideFigures(verdict=summary.verdict, first_loss=losses[0] if losses else None,
                       final_loss=losses[-1] if losses else None,
                       tokens_per_s=train.tokens_per_s if train else None,
                       peak_memory_gib=train.peak_memory_gib if train else None,
                       train_s=summary.timings_s.get("train"), run_dir=run.run_dir,
                       why=summary.reason if summary.verdict != "pass" else None)


class CanaryRow(BaseModel):
    """One scenario x init: the pinned side's figures beside the successor's."""

    scenario: str
    init: str
    pinned: SideFigures
    successor: SideFigures

    def verdict_changed(self) -> bool:
        """Whether the two sides' verdicts differ (a side without a summary counts as its own verdict)."""
        return self.pinned.verdict != self.successor.verdict


class CanaryResult(BaseModel):
    """A canary: its folder, target, the two sides, the packages that differ (titanflow.judge.environment
    .stack_difference, pinned to successor: ``+name v``, ``-name v``, ``name a -> b``) and one row per run."""

    canary_id: str
    folder: str
    target: str
    pinned: CanarySide
    successor: CanarySide
    packages: list[str] = Field(default_factory=list)
    stack_error: str | None = Field(None, description="why the packages could not be compared")
    rows: list[CanaryRow] = Field(default_factory=list)
    started_at: datetime.datetime
    finished_at: datetime.datetime | None = None


def headline(result: CanaryResult) -> str:
    """One line: the sides, how many packages differ, how many runs changed verdict."""
    changed = sum(row.verdict_changed() for row in result.rows)
    return (f"canary {result.pinned.profile} -> {result.successor.profile} on {result.target}: "
            f"{len(result.packages)} package(s) differ; {changed} of {len(result.rows)} run(s) changed verdict")


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pair(a: float | None, b: float | None, digits: int) -> str:
    """``a -> b`` with the relative change where both are there and ``a`` is not zero."""
    text = f"{_number(a, digits)} -> {_number(b, digits)}"
    return f"{text} ({(b - a) / abs(a):+.1%})" if a and b is not None else text


def canary_markdown(result: CanaryResult) -> str:
    """The report: the headline, the sides' venvs, the packages that differ, the runs side by side, and the reason
    of each side that did not pass."""
    pinned, successor = result.pinned, result.successor
    lines = [f"# {headline(result)}", "",
             f"- pinned: `{pinned.profile}` ({pinned.venv})", f"- successor: `{successor.profile}` ({successor.venv})",
             f"- folder: {result.folder}", "", f"## Packages that differ ({pinned.profile} -> {successor.profile})", ""]
    if result.stack_error:
        lines.append(f"not compared: {result.stack_error}")
    lines += [f"- `{line}`" for line in result.packages] or ["none"]
    lines += ["", "## Runs (pinned -> successor)", "",
              "| scenario | init | verdict | first-step loss | final loss | tokens/s | peak memory GiB | train s |",
              "|---|---|---|---|---|---|---|---|"]
    for row in result.rows:
        a, b = row.pinned, row.successor
        verdict = f"{a.verdict or 'no summary'} -> {b.verdict or 'no summary'}" + (
            " **changed**" if row.verdict_changed() else "")
        lines.append(f"| {row.scenario} | {row.init} | {verdict} | {_pair(a.first_loss, b.first_loss, 4)} | "
                     f"{_pair(a.final_loss, b.final_loss, 4)} | {_pair(a.tokens_per_s, b.tokens_per_s, 0)} | "
                     f"{_pair(a.peak_memory_gib, b.peak_memory_gib, 3)} | {_pair(a.train_s, b.train_s, 1)} |")
    whys = [(row, side, figures_) for row in result.rows
            for side, figures_ in ((pinned.profile, row.pinned), (successor.profile, row.successor)) if figures_.why]
    if whys:
        lines += ["", "## Runs that did not pass", ""]
        lines += [f"- {row.scenario}/{row.init} on `{side}`: {f.why.splitlines()[0] if f.why else ''} ({f.run_dir})"
                  for row, side, f in whys]
    return "\n".join(lines) + "\n"
