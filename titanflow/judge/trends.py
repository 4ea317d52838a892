"""Trends: the last nights of each scenario x init from the run history, regressions marked.

    from titanflow.judge import trends
    from titanflow.record import history
    table = trends.trend_table(history.read_history(target="cpu"), nights=14)

One row per (target, scenario, init, workload) and night: the night is the UTC date the run
started (the nightly starts at 02:00 UTC); when a workload ran more than once that night, the row
shows its last run, ``runs`` says how many there were and ``failed_runs`` how many of them failed. The values are those of
:data:`TREND_METRICS`; a workload is the history's ``config_key`` (the nightly's runs share one per
scenario x init, a run by hand with other steps has another), so a trend never mixes workloads.

Regressions marked: the history keeps each run's verdict, failure class and reason, not the
findings of the regression rules (those are in the run's summary.json, whose folder may be gone).
A run that failed is marked ``fail: <class>`` (``cancelled`` for a cancelled one); the
``history_median`` rules (tokens/s, memory, time) are evaluated again on the row against the
history (titanflow.judge.regression.evaluate), which takes the same comparable runs that finished
before it as when the run was judged (and the node's baseline in force now, where one is), so each out of
margin is marked ``<metric> <change> (<k> of <N>)``: the consecutive runs out of margin, flagged below N,
the run failed (class performance) at N; its trend column is listed in ``regressed``. The ``golden_curve``
rule is not evaluated again: a loss curve out of band failed the run (class numerics) and is marked by its verdict, against the
golden it was judged with then, not today's. A night whose installed stack (every Python distribution: the history's
``stack_digest``) differs from the night before's is marked in ``stack`` with both digests and the run it changed from
(``stack_changed_from``); titanflow.report.trends names the packages from both runs' summaries.
"""

from __future__ import annotations

import pandas as pd

from titanflow.judge import regression

#: Trend columns (history columns) and how reports title them.
TREND_METRICS = {
    "first_step_loss": "first-step loss (nats)",
    "final_loss": "final loss (nats)",
    "tokens_per_s": "tokens/s",
    "peak_memory_gib": "peak memory (GiB)",
    "total_s": "total time (s)",
}

#: Rule metrics whose regression marks a trend column other than their own (the rest mark their own
#: column when it is a trend column, e.g. tokens_per_s).
MARKED_COLUMN = {"peak_rss_bytes": "peak_memory_gib"}

#: Nights shown by default (the nightly's trends artifact).
DEFAULT_NIGHTS = 14

#: Columns of :func:`trend_table`, in order.
COLUMNS = ("target", "scenario", "init", "workload", "night", "run_id", "runs", "failed_runs", "verdict", *TREND_METRICS,
           "regressions", "regressed", "stack_changed_from", "stack")


def median_rules(rules: regression.Rules | None = None) -> regression.Rules:
    """The ``history_median`` rules of ``rules`` (default: the rules file in force), with its baseline and
    performance policies."""
    rules = rules or regression.load_rules()
    return regression.Rules(baseline=rules.baseline, performance=rules.performance,
                            rules=[r for r in rules.rules if r.kind == "history_median"])


def run_marks(row: dict, runs: pd.DataFrame, rules: regression.Rules) -> tuple[list[str], list[str]]:
    """(marks, regressed trend columns) of one history row (module docstring); ``rules``: :func:`median_rules`."""
    marks = []
    if row["verdict"] == "fail":
        marks.append(f"fail: {row.get('failure_class') or 'unclassified'}")
    elif row["verdict"] == "cancelled":
        marks.append("cancelled")
    columns = []
    for finding in regression.regressions(regression.evaluate(row, runs, rules)):
        change = (finding.value - finding.baseline) / finding.baseline if finding.baseline else None
        streak = f" ({finding.streak})" if finding.streak else ""
        marks.append((f"{finding.metric} {change:+.0%}" if change is not None else finding.metric) + streak)
        column = MARKED_COLUMN.get(finding.metric, finding.metric)
        if column in TREND_METRICS and column not in columns:
            columns.append(column)
    return marks, columns


def trend_table(runs: pd.DataFrame, *, target: str | None = None, nights: int = DEFAULT_NIGHTS,
                workloads: list[str] | None = None, rules: regression.Rules | None = None) -> pd.DataFrame:
    """The last ``nights`` nights of each (target, scenario, init, workload) of ``runs`` (the history
    table, titanflow.record.history.read_history), oldest night first within each; columns :data:`COLUMNS`
    (``night`` a ``datetime.date``, ``regressions`` the marks joined by "; ", ``regressed`` a list).

    ``target``: only that target's runs; ``workloads``: only these config_keys (the nightly passes its
    own); ``rules``: the rules to mark with (default the committed file's ``history_median`` rules).

    Raises:
        ValueError: ``nights`` below 1.
    """
    if nights < 1:
        raise ValueError(f"nights: {nights}; fix: pass at least 1 (default {DEFAULT_NIGHTS})")
    if runs.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    rules = median_rules(rules)
    chosen = runs
    if target is not None:
        chosen = chosen[chosen.target == target]
    if workloads is not None:
        chosen = chosen[chosen.config_key.isin(workloads)]
    chosen = chosen.assign(night=pd.to_datetime(chosen.started_at, utc=True).dt.date).sort_values("finished_at")
    rows = []
    for (tgt, scenario, init, workload), group in chosen.groupby(["target", "scenario", "init", "config_key"],
                                                                 sort=True):
        before = None  # the last run of the night before, whose installed stack tonight's is compared with
        nights_of_group = list(group.groupby("night", sort=True))
        if len(nights_of_group) > nights:
            before = nights_of_group[-nights - 1][1].iloc[-1]
        for night, runs_of_night in nights_of_group[-nights:]:
            marks, regressed = [], []
            for _, run in runs_of_night.iterrows():
                found, columns = run_marks(run.to_dict(), runs, rules)
                marks += [m for m in found if m not in marks]
                regressed += [c for c in columns if c not in regressed]
            last = runs_of_night.iloc[-1]
            changed = _stack_changed(before, last)
            before = last
            rows.append({"target": tgt, "scenario": scenario, "init": init, "workload": workload, "night": night,
                         "run_id": last.run_id, "runs": len(runs_of_night),
                         "failed_runs": int((runs_of_night.verdict == "fail").sum()), "verdict": last.verdict,
                         **{m: None if pd.isna(last[m]) else float(last[m]) for m in TREND_METRICS},
                         "regressions": "; ".join(marks), "regressed": regressed,
                         "stack_changed_from": changed,
                         "stack": f"stack {_digest_of(changed, group)} -> {last.stack_digest}" if changed else ""})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _digest(run) -> str | None:
    value = run.get("stack_digest") if run is not None else None
    return value if isinstance(value, str) else None


def _stack_changed(before, last) -> str | None:
    """The run id of ``before`` (the last run of the night before) when its installed stack's digest differs from
    ``last``'s; None when they are the same or either was not recorded."""
    old, new = _digest(before), _digest(last)
    return before.run_id if old and new and old != new else None


def _digest_of(run_id: str, group: pd.DataFrame) -> str:
    """The stack digest of run ``run_id`` of ``group``."""
    return str(group[group.run_id == run_id].iloc[-1].stack_digest)
