"""Regression rules (data, in ``regression_rules.toml``) and their evaluation against history.

    from titanflow.judge import regression
    from titanflow.record import history
    row = history.append_run("runs/<run-id>/summary.json").as_record()
    findings = regression.evaluate(row, history.read_history(scenario=row["scenario"], target=row["target"]))
    table = [f.as_record() for f in findings]          # rows for prefect.artifacts.create_table_artifact

Two kinds of rule (the TOML file's header explains its fields):

- ``golden_curve``: every step's loss against the golden loss curve that applies to the run
  (titanflow.judge.goldens.golden_for), within an absolute margin (nats). The curve is used
  only when it was recorded with the run's workload (the ``config_key`` in its header). The
  margin holds a run that computes the same sums as the recording (same numerics environment
  and checkpoint: ``GoldenCurve.same_numerics``); any other run is held to the rule's ``band``,
  measured across environments (benchmarks/golden_band.py), and its finding says so.
- ``history_median``: a metric against the median of the last ``baseline.runs``
  passing runs of the same scenario, target, init and parameters that finished
  before it, within a relative margin in the worse direction.

Each finding carries the rule's class: ``numerics`` for the loss curve (one of the failure
classes of titanflow.judge.failures) and ``performance`` for throughput, memory and time (a
regression of a run that may well have passed).

A rule without enough to compare with reports status "no baseline" (or "no value"
when the run lacks the metric, e.g. a run that failed before training); it never
passes silently.

Golden curves are recorded from a real run (titanflow.judge.goldens.RECORD_COMMAND).
"""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from titanflow.history_row import METRICS
from titanflow.judge.baselines import NodeBaseline, baseline_for
from titanflow.judge.environment import describe, stack_difference
from titanflow.judge.goldens import GOLDEN_DIR, curve_path, golden_for
from titanflow.results import Finding, FindingClass, Status

#: The committed rules.
RULES_PATH = Path(__file__).with_name("regression_rules.toml")

#: Row columns a ``history_median`` rule may name: the history row's metrics (titanflow.history_row.METRICS: the
#: fields marked ``"metric": True``), plus ``task_seconds`` (every ``seconds_<task>`` column).
HISTORY_METRICS = (*METRICS, "task_seconds")

#: Row columns a ``golden_curve`` rule may name.
CURVE_METRICS = ("losses",)


class Rule(BaseModel):
    """One regression rule; ``margin`` is absolute (golden_curve, nats) or relative (history_median, 0.05 = 5 %)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kind: Literal["golden_curve", "history_median"]
    metric: str
    margin: float = Field(gt=0)
    direction: Literal["lower_is_worse", "higher_is_worse"] | None = None
    noise_floor: float = Field(0.0, ge=0)
    band: float | None = Field(None, gt=0, description="golden_curve: the margin (nats) for a run whose numerics "
                               "environment or checkpoint differs from the golden's (measured across environments)")
    finding_class: FindingClass = Field(alias="class")

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")  # absent when the kind itself was refused
        known = CURVE_METRICS if kind == "golden_curve" else HISTORY_METRICS
        if metric not in known:
            raise ValueError(f"unknown {metric!r} for kind {kind!r}; known: {', '.join(known)}")
        return metric

    @model_validator(mode="after")
    def _check(self) -> "Rule":
        if self.kind == "history_median" and self.direction is None:
            raise ValueError("direction: a history_median rule needs lower_is_worse or higher_is_worse")
        if self.band is not None and (self.kind != "golden_curve" or self.band < self.margin):
            raise ValueError(f"band: {self.band} must belong to a golden_curve rule and be at least its margin "
                             f"{self.margin}")
        return self


class Baseline(BaseModel):
    """How many passing runs make a history baseline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(5, ge=1, description="median of the last `runs` passing runs")
    min_runs: int = Field(3, ge=1, description="fewer passing runs than this: no baseline")

    @model_validator(mode="after")
    def _check(self) -> "Baseline":
        if self.min_runs > self.runs:
            raise ValueError(f"min_runs: {self.min_runs} exceeds runs {self.runs}; make it at most runs")
        return self


class Rules(BaseModel):
    """The rules file: a baseline policy and a list of rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: Baseline = Baseline()
    rules: list[Rule] = Field(min_length=1)


def load_rules(path: Path | str = RULES_PATH) -> Rules:
    """Read and validate a rules TOML file.

    Raises:
        ValueError: a TOML syntax error, or a field that fails validation; the message
            names the file and each bad field (e.g. ``rules.2.metric``) with what is allowed.
    """
    path = Path(path)
    try:
        return Rules.model_validate(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from err
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                             for e in err.errors())
        raise ValueError(f"{path}: {problems}") from None


def _gaps(losses: list[float], reference: dict[int, float], steps: list[int]) -> tuple[dict[int, float], int]:
    """(|loss - reference| per step of ``steps``, infinite for a non-finite loss; the step of the largest)."""
    gaps = {s: abs(losses[s - 1] - reference[s]) if math.isfinite(losses[s - 1]) else math.inf for s in steps}
    return gaps, max(steps, key=lambda s: gaps[s])


def _check_against_node(rule: Rule, row: dict, losses: list[float], node: NodeBaseline,
                        stack: dict | None) -> Finding:
    """The golden_curve rule against the node's own baseline of the run's workload and hardware: every step both
    logged (``losses``, the row's), the worst decides; the exact lane (the same numerics environment and installed
    stack) at the margin, else the band lane at the band, naming what differs (``stack``: the run's installed stack,
    for the packages)."""
    steps = [s for s in range(1, len(losses) + 1) if s in node.losses]
    same = row.get("environment_key") == node.environment_key and row.get("stack_digest") == node.stack_digest
    margin, lane = rule.margin, "exact lane: the same environment"
    if not same:
        margin = rule.band or rule.margin
        changed = stack_difference(node.stack, stack)
        what = (f"{len(changed)} package(s) differ: {', '.join(changed[:6])}{', ...' if len(changed) > 6 else ''}"
                if changed else f"numerics environment {node.environment_key} -> {row.get('environment_key')}, "
                                f"stack {node.stack_digest} -> {row.get('stack_digest')}")
        lane = f"band lane: another environment than the baseline's ({what})"
    if not steps:
        return Finding(metric=rule.metric, margin=margin, status="no baseline", finding_class=rule.finding_class,
                       detail=f"node baseline {node.key} (run {node.run_id}) shares no step with the run")
    gaps, worst = _gaps(losses, node.losses, steps)
    parted = [s for s in steps if gaps[s] > margin]
    passed = not parted
    where = f"parts from it at step {parted[0]}, " if parted else ""
    detail = (f"{where}step {worst}: |{losses[worst - 1]:.6f} - {node.losses[worst]:.6f}| = {gaps[worst]:.6f} "
              f"{'<=' if passed else '>'} {margin} (worst of {len(steps)} steps vs node baseline {node.key}, run "
              f"{node.run_id}, promoted {node.promoted_at:%Y-%m-%d}; {lane})")
    return Finding(metric=rule.metric, value=losses[worst - 1], baseline=node.losses[worst], margin=margin,
                   passed=passed, status="pass" if passed else "fail", finding_class=rule.finding_class, detail=detail)


def _check_curve(rule: Rule, row: dict, golden_dir: Path, history_dir: Path | None = None,
                 stack: dict | None = None) -> Finding:
    """The golden_curve rule on one run: the worst step decides. The node's own baseline of the run's workload and
    hardware comes first (titanflow.judge.baselines: :func:`_check_against_node`); else a run of the golden's workload
    is compared over every step it logged, a shorter run of that workload over the leading steps its schedule shares
    with the golden's (titanflow.judge.goldens.GoldenCurve.shared_steps)."""
    losses = list(row.get("losses") if row.get("losses") is not None else [])
    parameters = json.loads(row.get("parameters") or "{}")
    weights = parameters.get("weights")
    name = curve_path(row["scenario"], row["target"], row["init"], model_spec=parameters.get("model_spec")).name

    def finding(status: Status, detail: str, value=None, baseline=None, passed=None) -> Finding:
        return Finding(metric=rule.metric, value=value, baseline=baseline, margin=rule.margin, passed=passed,
                       status=status, finding_class=rule.finding_class, detail=detail)

    if not losses:
        return finding("no value", "the run logged no loss")
    node = baseline_for(row, history_dir)
    if node is not None:
        return _check_against_node(rule, row, losses, node, stack)
    curve = golden_for(row["scenario"], row["target"], row["init"], weights, golden_dir, parameters.get("model_spec"))
    if curve is None:
        promote = f"; make this run the baseline of its workload on this node: titanflow golden promote {row['run_id']}"
        return finding("no baseline", (f"no golden curve {name}" if weights is None
                                       else f"the goldens are of the embedded weights; this run trained {weights}")
                       + f" and no baseline on this node{promote}")
    compared, prefix = len(losses), ""
    if not curve.same_workload(row.get("config_key")):
        shared = curve.shared_steps(parameters)
        if not shared:
            return finding("no baseline", f"{name} was recorded with parameters {curve.config_key}, this run has "
                           f"{row.get('config_key')}")
        compared, prefix = min(compared, shared), f", the {shared} its {parameters['steps']} steps share with it"
    golden = curve.losses
    steps = [s for s in range(1, compared + 1) if s in golden]
    if not steps:
        return finding("no baseline", f"{name} shares no step with the run")
    margin, elsewhere = rule.margin, ""
    if not curve.same_numerics(_text(row.get("environment_key")), _text(row.get("weights_digest"))):
        margin = rule.band or rule.margin
        elsewhere = (f"; other numerics than the golden's ({describe(curve.environment)}"
                     f"{', checkpoint ' + curve.weights_digest if curve.weights_digest else ''}): "
                     f"the band measured across environments")
    gaps, worst = _gaps(losses, golden, steps)
    passed = gaps[worst] <= margin
    detail = (f"step {worst}: |{losses[worst - 1]:.5f} - {golden[worst]:.5f}| = {gaps[worst]:.5f} "
              f"{'<=' if passed else '>'} {margin} (worst of {len(steps)} steps vs {name}{prefix}{elsewhere})")
    return Finding(metric=rule.metric, value=losses[worst - 1], baseline=golden[worst], margin=margin, passed=passed,
                   status="pass" if passed else "fail", finding_class=rule.finding_class, detail=detail)


def _text(value) -> str | None:
    """A history cell as text; None for a missing one (NaN from tables written before the column)."""
    return value if isinstance(value, str) else None


# --- history medians ----------------------------------------------------------------------------

def baseline_runs(row: dict, history: pd.DataFrame, baseline: Baseline) -> pd.DataFrame:
    """The last ``baseline.runs`` passing runs comparable with ``row`` (same scenario, target, init,
    config_key) that finished before it; fewer (or none) when the history is short."""
    if history.empty:
        return history
    same = ((history.scenario == row["scenario"]) & (history.target == row["target"])
            & (history.init == row["init"]) & (history.config_key == row["config_key"])
            & (history.verdict == "pass") & (history.run_id != row["run_id"])
            & (history.finished_at < pd.Timestamp(row["finished_at"])))
    return history[same].sort_values("finished_at").tail(baseline.runs)


def _check_median(rule: Rule, metric: str, row: dict, previous: pd.DataFrame, baseline: Baseline) -> Finding:
    """A history_median rule on one column of one run."""
    value = row.get(metric)
    value = None if value is None or pd.isna(value) else float(value)
    past = [float(x) for x in previous[metric].dropna()] if metric in previous else []

    def finding(status: Status, detail: str, base=None, passed=None) -> Finding:
        return Finding(metric=metric, value=value, baseline=base, margin=rule.margin, passed=passed,
                       status=status, finding_class=rule.finding_class, detail=detail)

    if value is None:
        return finding("no value", f"the run has no {metric}")
    if len(past) < baseline.min_runs:
        return finding("no baseline", f"{len(past)} comparable passing run(s), need {baseline.min_runs}")
    median = statistics.median(past)
    if rule.direction == "lower_is_worse":
        limit = median * (1 - rule.margin)
        passed = value >= limit or median - value <= rule.noise_floor
        sign = ">="
    else:
        limit = median * (1 + rule.margin)
        passed = value <= limit or value - median <= rule.noise_floor
        sign = "<="
    change = (value - median) / median if median else math.inf
    detail = (f"{value:.4g} vs median {median:.4g} of {len(past)} runs ({change:+.1%}); "
              f"needs {sign} {limit:.4g}" + (f" or a change within {rule.noise_floor}" if rule.noise_floor else ""))
    return finding("pass" if passed else "fail", detail, median, passed)


def evaluate(row: dict | pd.Series, history: pd.DataFrame, rules: Rules | None = None,
             golden_dir: Path = GOLDEN_DIR, history_dir: Path | None = None, stack: dict | None = None) -> list[Finding]:
    """Every rule on one run (a row of titanflow.record.history) -> findings, in rule order.

    ``history``: titanflow.record.history.read_history(); may include ``row`` itself and
    runs of other scenarios (only comparable earlier passing runs are used).
    ``rules``: default :func:`load_rules` of the committed file. ``history_dir``: where the node's baselines are
    (titanflow.judge.baselines; default the history folder); ``stack``: the run's installed stack
    (summary.json's), which a band-lane finding names the package differences from.
    """
    rules = rules or load_rules()
    row = dict(row)
    previous = baseline_runs(row, history, rules.baseline)
    findings = []
    for rule in rules.rules:
        if rule.kind == "golden_curve":
            findings.append(_check_curve(rule, row, golden_dir, history_dir, stack))
        elif rule.metric == "task_seconds":
            findings += [_check_median(rule, column, row, previous, rules.baseline)
                         for column in sorted(row) if column.startswith("seconds_")]
        else:
            findings.append(_check_median(rule, rule.metric, row, previous, rules.baseline))
    return findings


def regressions(findings: list[Finding]) -> list[Finding]:
    """The findings that failed (``passed`` is False); "no baseline" and "no value" are not regressions."""
    return [f for f in findings if f.passed is False]
