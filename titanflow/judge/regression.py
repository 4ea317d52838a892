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
- ``history_median``: a metric against the node's baseline figure of it (the performance figures of the run
  promoted for the workload on this hardware, titanflow.judge.baselines) where one applies, else the median of
  the last ``baseline.runs`` passing runs of the same scenario, target, init and parameters that finished
  before it, within a relative margin in the worse direction, or within the rule's ``noise_floor`` (the
  metric's unit).

Each finding carries the rule's class: ``numerics`` for the loss curve (one of the failure
classes of titanflow.judge.failures) and ``performance`` for throughput, memory and time. A performance
finding out of margin fails the run (status "fail", class performance: titanflow.judge.verdict) only when the
workload's ``performance.consecutive`` last runs, this one included, were all out of margin against the same
reference (the history keeps each run's values: each earlier run is checked again); before that it is
"flagged" with its count (``streak``, "1 of 2"): one slow night is said, two in a row fail.

A rule without enough to compare with reports status "no baseline" (or "no value"
when the run lacks the metric, e.g. a run that failed before training); it never
passes silently.

Golden curves are recorded from a real run (titanflow.judge.goldens.RECORD_COMMAND).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tomllib
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from titan_cfg.targets import TARGETS, node_of
from titanflow.history_row import METRICS
from titanflow.judge.baselines import NodeBaseline, baseline_for, same_environment
from titanflow.judge.environment import describe, stack_difference
from titanflow.judge.goldens import GOLDEN_DIR, curve_path, golden_for
from titanflow.results import Finding, FindingClass, Status

#: The committed rules.
RULES_PATH = Path(__file__).with_name("regression_rules.toml")

#: The environment variable naming a node's own rules file (its measured noise floors, its margins), read instead of
#: the committed one.
RULES_ENV = "TITANFLOW_REGRESSION_RULES"


def rules_path() -> Path:
    """The rules file in force: ``$TITANFLOW_REGRESSION_RULES``, or, unset or empty, the committed one."""
    return Path(os.environ.get(RULES_ENV) or RULES_PATH)


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
    noise_floor: float | dict[str, float] = Field(
        0.0, description="a change no larger than this passes whatever the margin (the metric's unit): one figure for "
        "every node type, or one per node type ({cpu = 250}: titan_cfg.targets.node_of; a node type not named has none, "
        "its margin alone decides)")
    band: float | None = Field(None, gt=0, description="golden_curve: the margin (nats) for a run whose numerics "
                               "environment or checkpoint differs from the golden's (measured across environments)")
    finding_class: FindingClass = Field(alias="class")

    @field_validator("noise_floor")
    @classmethod
    def _floors(cls, floor: float | dict[str, float]) -> float | dict[str, float]:
        nodes = sorted({node_of(target) for target in TARGETS})
        for node, figure in (floor.items() if isinstance(floor, dict) else [("every node type", floor)]):
            if isinstance(floor, dict) and node not in nodes:
                raise ValueError(f"unknown node type {node!r}; known: {', '.join(nodes)}")
            if figure < 0:
                raise ValueError(f"{node}: {figure} is negative; a floor is 0 or more")
        return floor

    def floor(self, target: str) -> float:
        """The noise floor of a run on ``target`` (its node type's, 0 for a node type the rule names none for)."""
        if isinstance(self.noise_floor, dict):
            return self.noise_floor.get(node_of(target), 0.0)
        return self.noise_floor

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


class Performance(BaseModel):
    """When a performance rule out of margin fails the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    consecutive: int = Field(2, ge=1, description="out of margin on this many consecutive runs of the workload (this "
                             "one the last) fails the run; fewer are flagged ('1 of 2')")


class Rules(BaseModel):
    """The rules file: a baseline policy, the performance policy and a list of rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: Baseline = Baseline()
    performance: Performance = Performance()
    rules: list[Rule] = Field(min_length=1)


def load_rules(path: Path | str | None = None) -> Rules:
    """Read and validate a rules TOML file (default: :func:`rules_path`).

    Raises:
        ValueError: a file that cannot be read, a TOML syntax error, or a field that fails validation; the message
            names the file and each bad field (e.g. ``rules.2.metric``) with what is allowed.
    """
    path = Path(path) if path is not None else rules_path()
    try:
        return Rules.model_validate(tomllib.loads(path.read_text()))
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror}); fix: point {RULES_ENV} at a rules file, or unset "
                         f"it for the committed {RULES_PATH.name}") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from err
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                             for e in err.errors())
        raise ValueError(f"{path}: {problems}") from None


def curve_rule(rules: Rules | None = None) -> Rule | None:
    """The ``golden_curve`` rule of ``rules`` (default: the committed file): its margin is the exact lane's, its band
    the band lane's; None when the rules have none."""
    return next((r for r in (rules or load_rules()).rules if r.kind == "golden_curve"), None)


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
    same = same_environment(node, row.get("environment_key"), row.get("stack_digest"))
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


def _check_curve(rule: Rule, row: dict, golden_dir: Path, node: NodeBaseline | None = None,
                 stack: dict | None = None) -> Finding:
    """The golden_curve rule on one run: the worst step decides. The node's own baseline of the run's workload and
    hardware (``node``, titanflow.judge.baselines.baseline_for) comes first (:func:`_check_against_node`); else a
    run of the golden's workload is compared over every step it logged, a shorter run of that workload over the
    leading steps its schedule shares with the golden's (titanflow.judge.goldens.GoldenCurve.shared_steps)."""
    losses = list(row.get("losses") if row.get("losses") is not None else [])
    parameters = json.loads(row.get("parameters") or "{}")
    weights = parameters.get("weights")
    name = curve_path(row["scenario"], row["target"], row["init"], model_spec=parameters.get("model_spec")).name

    def finding(status: Status, detail: str, value=None, baseline=None, passed=None) -> Finding:
        return Finding(metric=rule.metric, value=value, baseline=baseline, margin=rule.margin, passed=passed,
                       status=status, finding_class=rule.finding_class, detail=detail)

    if not losses:
        return finding("no value", "the run logged no loss")
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
    earlier = _earlier_runs(row, history)
    return earlier[earlier.verdict == "pass"].tail(baseline.runs)


def _earlier_runs(row: dict, history: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``row``'s workload (scenario, target, init, config_key) that finished before it, oldest first."""
    same = ((history.scenario == row["scenario"]) & (history.target == row["target"])
            & (history.init == row["init"]) & (history.config_key == row["config_key"])
            & (history.run_id != row["run_id"]) & (history.finished_at < pd.Timestamp(row["finished_at"])))
    return history[same].sort_values("finished_at")


def _value(cell) -> float | None:
    """A history cell as a float; None for a missing one."""
    return None if cell is None or pd.isna(cell) else float(cell)


def _within(rule: Rule, value: float, reference: float, floor: float) -> bool:
    """Whether ``value`` is within the rule's relative margin of ``reference`` in the worse direction, or within
    ``floor`` of it (the rule's noise floor for the run's node type: :meth:`Rule.floor`; the metric's unit)."""
    if rule.direction == "lower_is_worse":
        return value >= reference * (1 - rule.margin) or reference - value <= floor
    return value <= reference * (1 + rule.margin) or value - reference <= floor


def _streak(rule: Rule, metric: str, reference: float, floor: float, earlier: pd.DataFrame, consecutive: int) -> int:
    """How many of the workload's runs just before this one (``earlier``, oldest first: judged runs, pass or fail)
    were out of margin against ``reference`` too, counting back until one was not (or lacked the metric), at most
    ``consecutive - 1``; the history keeps each run's values, so each is checked again against today's reference."""
    judged = earlier[earlier.verdict.isin(["pass", "fail"])] if not earlier.empty else earlier
    count = 0
    for cell in reversed(list(judged[metric]) if metric in judged else []):
        value = _value(cell)
        if count == consecutive - 1 or value is None or _within(rule, value, reference, floor):
            break
        count += 1
    return count


def _check_median(rule: Rule, metric: str, row: dict, earlier: pd.DataFrame, rules: Rules,
                  node: NodeBaseline | None = None) -> Finding:
    """A history_median rule on one column of one run: against the node baseline's figure of the metric when one
    applies (``node``), else the median of the last passing runs of the workload; a performance rule out of margin
    fails the run only on ``rules.performance.consecutive`` consecutive runs of the workload, this one the last,
    and is flagged before ("1 of 2"). ``earlier``: the workload's runs before this one (:func:`_earlier_runs`)."""
    value = _value(row.get(metric))
    previous = earlier[earlier.verdict == "pass"].tail(rules.baseline.runs) if not earlier.empty else earlier

    def finding(status: Status, detail: str, base=None, passed=None, streak=None) -> Finding:
        return Finding(metric=metric, value=value, baseline=base, margin=rule.margin, passed=passed,
                       status=status, finding_class=rule.finding_class, detail=detail, streak=streak)

    if value is None:
        return finding("no value", f"the run has no {metric}")
    if node is not None and metric in node.performance:
        reference, source = node.performance[metric], f"node baseline {node.key} (run {node.run_id})"
    else:
        past = [float(x) for x in previous[metric].dropna()] if metric in previous else []
        if len(past) < rules.baseline.min_runs:
            return finding("no baseline", f"{len(past)} comparable passing run(s), need {rules.baseline.min_runs}")
        reference, source = statistics.median(past), f"median of {len(past)} runs"
    floor = rule.floor(row["target"])
    sign, limit = (">=", reference * (1 - rule.margin)) if rule.direction == "lower_is_worse" else \
        ("<=", reference * (1 + rule.margin))
    change = (value - reference) / reference if reference else math.inf
    detail = (f"{value:.4g} vs {source} {reference:.4g} ({change:+.1%}); needs {sign} {limit:.4g}"
              + (f" or a change within {floor} (the {node_of(row['target'])} noise floor)" if floor else ""))
    if _within(rule, value, reference, floor):
        return finding("pass", detail, reference, True)
    if rule.finding_class != "performance":
        return finding("fail", detail, reference, False)
    needed = rules.performance.consecutive
    count = 1 + _streak(rule, metric, reference, floor, earlier, needed)
    streak = f"{count} of {needed}"
    if count < needed:
        return finding("flagged", f"{detail}; out of margin on {streak} consecutive runs: flagged, the "
                       f"{_ordinal(needed)} in a row fails the run", reference, False, streak)
    return finding("fail", f"{detail}; out of margin on {streak} consecutive runs", reference, False, streak)


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def evaluate(row: dict | pd.Series, history: pd.DataFrame, rules: Rules | None = None, golden_dir: Path = GOLDEN_DIR,
             history_dir: Path | None = None, stack: dict | None = None) -> list[Finding]:
    """Every rule on one run (a row of titanflow.record.history) -> findings, in rule order.

    ``history``: titanflow.record.history.read_history(); may include ``row`` itself and
    runs of other scenarios (only comparable earlier runs are used: passing ones for the median, the last judged
    ones for a performance rule's consecutive count).
    ``rules``: default :func:`load_rules` of the committed file. ``history_dir``: where the node's baselines are
    (titanflow.judge.baselines; default the history folder): the one of the run's workload and hardware is the
    reference of the loss curve and of every performance figure it kept; ``stack``: the run's installed stack
    (summary.json's), which a band-lane finding names the package differences from.
    """
    rules = rules or load_rules()
    row = dict(row)
    node = baseline_for(row, history_dir)
    earlier = _earlier_runs(row, history) if not history.empty else history
    findings = []
    for rule in rules.rules:
        if rule.kind == "golden_curve":
            findings.append(_check_curve(rule, row, golden_dir, node, stack))
        elif rule.metric == "task_seconds":
            findings += [_check_median(rule, column, row, earlier, rules, node)
                         for column in sorted(row) if column.startswith("seconds_")]
        else:
            findings.append(_check_median(rule, rule.metric, row, earlier, rules, node))
    return findings


def regressions(findings: list[Finding]) -> list[Finding]:
    """The findings out of margin (``passed`` is False: failed or flagged); "no baseline" and "no value" are not
    regressions."""
    return [f for f in findings if f.passed is False]
