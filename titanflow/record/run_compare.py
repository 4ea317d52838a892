"""Two runs side by side: what a user compares by hand when a run fails against the last good one.

    from titanflow.record import history, run_compare
    runs = history.read_history()                           # the history table (titanflow.record.history)
    a, b = run_compare.find_run("native-cpu-random-...", runs), run_compare.find_run("...", runs)
    comparison = run_compare.compare(a, b)                   # RunComparison: B against A
    comparison.divergence_step                               # first step where |B - A| > margin, or None

A run is found by its run_id in the history table; a run the history lacks (its append failed,
``history_error`` in its summary) is read from its run folder instead, ``<runs root>/<run_id>/summary.json``
or a folder given as a path. The history records the package versions and the git commit when it
appends the run; for a run read from its folder the versions are those of its numerics environment
(torch, torchtitan, transformers; summary.json ``environment``) and the rest is unknown (None).

The margin the curves may part by is the ``golden_curve`` rule's (0.02 nats,
``titanflow/judge/regression_rules.toml``): two runs of one workload that stay within it would both
pass against the same golden curve. A step where one run's loss is not finite and the other's is
counts as parted; a step only one run logged is shown, not compared. Both runs must have logged a
curve: a run folder that was only rendered (``titanflow render``: ``job/``, no summary.json) is no run to
compare, and a run without a single logged loss (no losses in its summary or history row, no step in
its metrics.csv) is refused by :func:`compare` with :class:`NoCurveError`, naming the run and what is
missing, before anything is written.

"Comparable" is the history's own notion (titanflow.judge.regression.baseline_runs): the same
scenario, target, init and workload key (titanflow.judge.workload.config_key); :func:`last_passing`
finds the last passing comparable run before a given one, which the nightly compares each failed run with.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from titanflow import paths
from titanflow.history_row import METRICS, HistoryRow, extra
from titanflow.judge import regression
from titanflow.judge.environment import stack_difference
from titanflow.record import history
from titanflow.record.summary import NON_FINITE_STOP, SUMMARY, read_summary, recorded_stack

#: Columns compared side by side besides the per-task times (``seconds_<task>``), in this order: the history's
#: metrics (titanflow.history_row.METRICS) but the losses (the curves are compared step by step), then the wait for
#: the training slot and the total.
SIDE_BY_SIDE = (*(m for m in METRICS if m not in ("first_step_loss", "final_loss", "total_s")), "slot_wait_s",
                "total_s")

#: Row columns that record what the run ran with besides its parameters: versions, commit, numerics (the
#: history row's fields marked ``"provenance": True``).
PROVENANCE = tuple(name for name, field in HistoryRow.model_fields.items() if extra(field).get("provenance"))

#: Parameters that name a run rather than configure it: never listed as a difference.
IDENTITY_PARAMETERS = ("run_id",)


def curve_margin(rules: regression.Rules | None = None) -> float:
    """The ``golden_curve`` rule's margin (nats) of ``rules`` (default: the committed rules file).

    Raises:
        ValueError: the rules have no golden_curve rule on ``losses``.
    """
    rules = rules or regression.load_rules()
    for rule in rules.rules:
        if rule.kind == "golden_curve" and rule.metric == "losses":
            return rule.margin
    raise ValueError("rules: no golden_curve rule on losses; add one to titanflow/judge/regression_rules.toml")


def _cell(value: Any) -> Any:
    """A table cell as a Python value: NaN, NA and NaT as None, numpy scalars as Python's."""
    if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)) else value


def _folder_row(summary_path: Path) -> dict:
    """The history row of a run folder the history lacks, provenance only from what the folder records."""
    summary = read_summary(summary_path)
    row = history.row_from_summary(summary_path, summary).as_record()
    versions = (summary.environment or {}).get("versions", {})
    row |= {f"{name}_version": versions.get(name) for name in ("torch", "torchtitan", "transformers")}
    row |= {"prefect_version": None, "git_commit": None, "git_dirty": None}  # appended ones are of this checkout
    return row


def find_run(ref: str, runs: pd.DataFrame, runs_root: Path | None = None) -> dict:
    """The history row of the run ``ref`` (module docstring): its run_id in ``runs``, else a run folder,
    ``ref`` itself or ``<runs_root>/<ref>`` (default :func:`titanflow.paths.runs_root`), with a summary.json.

    Returns the row as a dict (NaN cells as None) with ``source``: "history" or "run folder".

    Raises:
        LookupError: ``ref`` is neither in the history nor a run folder (the message names both places), or
            is a run folder without summary.json (only rendered, or still running: the message says which).
    """
    if not runs.empty:
        found = runs[runs.run_id == ref]
        if len(found):
            return {k: _cell(v) for k, v in found.iloc[-1].items()} | {"source": "history"}
    root = runs_root or paths.runs_root()
    for folder in (Path(ref), root / ref):
        summary_path = folder / SUMMARY if folder.is_dir() else folder
        if summary_path.name == SUMMARY and summary_path.is_file():
            row = _folder_row(summary_path.resolve())
            kept = runs[(runs.run_id == row["run_id"]) & (runs.run_dir == row["run_dir"])] if not runs.empty else runs
            if len(kept):  # the same run by its folder: the history's row, with the provenance it recorded
                return {k: _cell(v) for k, v in kept.iloc[-1].items()} | {"source": "history"}
            return {k: _cell(v) for k, v in row.items()} | {"source": "run folder"}
        if folder.is_dir():
            _no_summary(folder.resolve())
    raise LookupError(f"run: {ref!r} is neither a run_id of the history ({len(runs)} run(s)) nor a run folder "
                      f"({root / ref}); fix: pass a run_id that `titanflow history --last 20` lists, or the path of a "
                      "run folder")


def _no_summary(folder: Path) -> None:
    """Raise the LookupError for a folder without summary.json that is, or is in, a run folder (its ``job/``
    holds job.json); return for any other folder."""
    run_dir = folder.parent if folder.name == "job" else folder
    if not (run_dir / "job" / "job.json").is_file():
        return
    trained = "train.log" if (run_dir / "train.log").is_file() else None
    state = (f"it has a {trained} but no {SUMMARY} yet: still running, or killed before the flow wrote it (titanflow "
             f"run --resume {run_dir.name} finishes it)" if trained else
             "only rendered (titanflow render: job/ holds the job files), never trained")
    raise LookupError(f"run: {run_dir} has no {SUMMARY}: {state}; fix: compare runs that trained (titanflow run), "
                      "e.g. a run_id that `titanflow history --last 20` lists")


class NoCurveError(ValueError):
    """A run to compare logged no loss; the message names the run and what is missing."""


def _missing_curve(row: dict) -> str | None:
    """What a row lacks for a curve (None when it has one): the run, where its losses would be, and why."""
    if _losses(row):
        return None
    failed = f"; it failed in {row['failed_task']}" if row.get("failed_task") else ""
    if row.get("source") == "run folder":
        metrics = Path(row["run_dir"]) / "metrics.csv"
        where = f"{metrics} {'logs no step' if metrics.is_file() else 'is missing'}"
        return f"{row['run_id']} ({row['run_dir']}): its {SUMMARY} records no losses and {where}{failed}"
    return f"{row['run_id']}: its history row records no losses{failed}"


def last_passing(row: dict, runs: pd.DataFrame) -> dict | None:
    """The last passing run comparable with ``row`` (same scenario, target, init, config_key) that
    finished before it (titanflow.judge.regression.baseline_runs), as a dict; None when there is none."""
    found = regression.baseline_runs(row, runs, regression.Baseline(runs=1, min_runs=1))
    return None if found.empty else {k: _cell(v) for k, v in found.iloc[-1].items()} | {"source": "history"}


class StepPair(BaseModel):
    """One training step of both runs: losses in nats, None where a run did not log the step."""

    step: int = Field(description="1-based, as torchtitan logs it")
    loss_a: float | None
    loss_b: float | None
    difference: float | None = Field(description="loss_b - loss_a (nats); None unless both logged the step; "
                                     "NaN or inf when a loss is not finite")
    parted: bool | None = Field(description="|difference| > the margin, or one loss not finite and the other "
                                "finite; None when only one run logged the step")


class SideBySide(BaseModel):
    """One metric of both runs: ``change`` is (b - a) / a, None when either is missing or a is 0."""

    metric: str = Field(description="a history column: tokens_per_s, peak_memory_gib (GiB), seconds_<task> (s), ...")
    a: float | None
    b: float | None
    change: float | None


class Difference(BaseModel):
    """A parameter or provenance field (version, commit, numerics environment) whose values differ."""

    name: str = Field(description="a ScenarioRun field (nested ones dotted: tolerances.first_step_loss) "
                      "or a history column (torch_version, git_commit, ...)")
    a: Any
    b: Any


class RunComparison(BaseModel):
    """Run B against run A (module docstring); every figure from their history rows."""

    run_a: str
    run_b: str
    run_dir_a: str
    run_dir_b: str
    source_a: str = Field(description="history | run folder")
    source_b: str
    verdict_a: str
    verdict_b: str
    failure_class_b: str | None
    scenario: str = Field(description="run B's (so are target and init)")
    target: str
    init: str
    workload_a: str = Field(description="scenario-target-init/config_key")
    workload_b: str
    comparable: bool = Field(description="the same workload: what the history compares runs by")
    margin: float = Field(description="nats: the golden_curve rule's margin")
    steps: list[StepPair]
    divergence_step: int | None = Field(description="first step whose pair parted; None when none did")
    largest_gap: float | None = Field(description="largest |difference| over the steps both logged (nats)")
    metrics: list[SideBySide]
    parameters: list[Difference] = Field(description="parameters whose values differ")
    provenance: list[Difference] = Field(description="versions, commit, numerics environment that differ")
    packages: list[str] | None = Field(None, description="the installed Python distributions that differ, B against A "
                                       "(titanflow.judge.environment.stack_difference of their summary.json stacks: "
                                       "+added, -removed, name a -> b); None when a run recorded no stack")

    def environment_line(self) -> str:
        """What the runs' installed stacks say: the packages that differ, that none do, or that one was not recorded."""
        if self.packages is None:
            return "environment: not compared (a run recorded no installed stack)"
        if not self.packages:
            return "environment: the same installed packages"
        shown = ", ".join(self.packages[:8]) + (f", ... ({len(self.packages) - 8} more)" if len(self.packages) > 8
                                                else "")
        return f"environment: {len(self.packages)} package(s) differ: {shown}"

    def headline(self) -> str:
        """One line: where the curves part (or that they do not), and what differs."""
        if self.divergence_step is not None:
            pair = self.steps[self.divergence_step - 1]
            curves = (f"curves part at step {self.divergence_step} ({pair.loss_b} vs {pair.loss_a}, "
                      f"|difference| > {self.margin} nats)")
        else:
            shared = sum(p.parted is not None for p in self.steps)
            gap = f"largest gap {self.largest_gap:.4g} nats" if self.largest_gap is not None else "no step in common"
            curves = f"curves within {self.margin} nats over {shared} common steps ({gap})"
        differ = [d.name for d in self.parameters + self.provenance]
        changed = f"{len(self.packages)} package(s) differ; " if self.packages else ""
        return (f"{self.run_b} ({self.verdict_b}) vs {self.run_a} ({self.verdict_a}): {changed}{curves}; "
                + (f"differ: {', '.join(differ)}" if differ else "same parameters and versions"))


def _losses(row: dict) -> list[float]:
    """The row's logged losses, then NaN for the step torchtitan stopped at when its error says so ("Loss is not
    finite ... at step N", raised before the step is logged: titanflow.record.summary.NON_FINITE_STOP), so a
    diverged run parts from a finite one where it diverged instead of agreeing over the steps before."""
    losses = [float(v) for v in (row.get("losses") or [])]
    stop = NON_FINITE_STOP.search(row.get("error") or "")
    if stop and int(stop.group(1)) == len(losses) + 1:
        losses.append(float("nan"))
    return losses


def step_pairs(losses_a: list[float], losses_b: list[float], margin: float) -> list[StepPair]:
    """Both curves step by step (losses in nats, step 1 first), as many steps as the longer has."""
    pairs = []
    for step in range(1, max(len(losses_a), len(losses_b)) + 1):
        a = losses_a[step - 1] if step <= len(losses_a) else None
        b = losses_b[step - 1] if step <= len(losses_b) else None
        if a is None or b is None:
            pairs.append(StepPair(step=step, loss_a=a, loss_b=b, difference=None, parted=None))
            continue
        finite = math.isfinite(a), math.isfinite(b)
        parted = finite[0] != finite[1] or (all(finite) and abs(b - a) > margin)
        pairs.append(StepPair(step=step, loss_a=a, loss_b=b, difference=b - a, parted=parted))
    return pairs


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def side_by_side(a: dict, b: dict) -> list[SideBySide]:
    """:data:`SIDE_BY_SIDE`, then every ``seconds_<task>`` either row has, in the order the rows have them."""
    tasks = list(dict.fromkeys(k for row in (a, b) for k in row if k.startswith("seconds_")))
    found = []
    for metric in (*SIDE_BY_SIDE, *tasks):
        va, vb = _number(a.get(metric)), _number(b.get(metric))
        change = (vb - va) / va if va and vb is not None else None
        found.append(SideBySide(metric=metric, a=va, b=vb, change=change))
    return found


def _flat(parameters: dict, prefix: str = "") -> dict[str, Any]:
    """Nested parameters (tolerances, kernels, trim) as dotted names."""
    flat = {}
    for name, value in parameters.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{name}.")
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def differences(a: dict, b: dict) -> tuple[list[Difference], list[Difference]]:
    """(parameters that differ, provenance fields that differ) of two history rows."""
    pa, pb = (_flat(json.loads(row.get("parameters") or "{}")) for row in (a, b))
    params = [Difference(name=n, a=pa.get(n), b=pb.get(n)) for n in sorted(pa.keys() | pb.keys())
              if n not in IDENTITY_PARAMETERS and pa.get(n) != pb.get(n)]
    provenance = [Difference(name=n, a=a.get(n), b=b.get(n)) for n in PROVENANCE if a.get(n) != b.get(n)]
    return params, provenance


def _workload(row: dict) -> str:
    return f"{row['scenario']}-{row['target']}-{row['init']}/{row['config_key']}"


def compare(a: dict, b: dict, margin: float | None = None) -> RunComparison:
    """Run ``b`` against run ``a`` (history rows, e.g. from :func:`find_run`).

    ``margin``: nats the curves may part by; default :func:`curve_margin` of the committed rules.

    Raises:
        NoCurveError: a run logged no loss (a ValueError naming each such run and what is missing).
        ValueError: ``margin`` is not a positive finite number.
    """
    missing = [found for found in map(_missing_curve, (a, b)) if found]
    if missing:
        raise NoCurveError("run: no loss curve to compare: " + "; ".join(missing) + "; fix: compare runs that logged "
                           "at least one training step")
    margin = curve_margin() if margin is None else margin
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin: {margin} nats; fix: pass a positive number (the golden_curve rule's is 0.02)")
    steps = step_pairs(_losses(a), _losses(b), margin)
    parted = [p.step for p in steps if p.parted]
    gaps = [abs(p.difference) for p in steps if p.difference is not None and math.isfinite(p.difference)]
    params, provenance = differences(a, b)
    return RunComparison(
        run_a=a["run_id"], run_b=b["run_id"], run_dir_a=a["run_dir"], run_dir_b=b["run_dir"],
        source_a=a.get("source", "history"), source_b=b.get("source", "history"),
        verdict_a=a["verdict"], verdict_b=b["verdict"], failure_class_b=b.get("failure_class"),
        scenario=b["scenario"], target=b["target"], init=b["init"],
        workload_a=_workload(a), workload_b=_workload(b), comparable=_workload(a) == _workload(b),
        margin=margin, steps=steps, divergence_step=parted[0] if parted else None,
        largest_gap=max(gaps) if gaps else None,
        metrics=side_by_side(a, b), parameters=params, provenance=provenance,
        packages=_packages(a, b))


def _packages(a: dict, b: dict) -> list[str] | None:
    """B's installed packages against A's (titanflow.judge.environment.stack_difference); None if either is
    unrecorded."""
    stack_a, stack_b = recorded_stack(a.get("run_dir")), recorded_stack(b.get("run_dir"))
    return stack_difference(stack_a, stack_b) if stack_a and stack_b else None
