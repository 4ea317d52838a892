"""Baselines a node earns: a passed run promoted on purpose becomes what later runs of its workload on its hardware are
judged against, the whole loss curve at the precision the run recorded, its performance figures and its environment.

No golden can be recorded here for a trn2 or cuda node, and the cpu goldens are of the embedded weights; a node's own
baseline covers both (user weights included). One file per workload x hardware, beside the history table:
``<history>/baselines/<scenario>-<target>-<init>-<config_key>-<hardware digest>.json`` (:class:`NodeBaseline`, with
when, from which run and why). A retired baseline is moved to ``baselines/retired/`` with the time it was retired,
never deleted.

    titanflow golden promote RUN_ID --why "first night of SDK 2.33"
    titanflow golden list
    titanflow golden show KEY
    titanflow golden retire KEY

The golden_curve rule (titanflow.judge.regression) compares a run with its node's baseline before the repository's
goldens: in the exact lane (the same environment: numerics environment and installed stack) at the rule's margin,
otherwise in the band lane at its band, naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from titan_cfg.targets import node_of
from titanflow import paths
from titanflow.judge.environment import hardware
from titanflow.judge.workload import config_key

#: The folder of the baselines inside the history folder.
BASELINES = "baselines"
#: The losses, which a baseline keeps as its curve, not as performance figures.
LOSS_METRICS = ("first_step_loss", "final_loss")


def performance_columns(row: dict) -> list[str]:
    """The performance figures a baseline keeps of the history ``row``: every metric column of the history
    (titanflow.history_row.METRICS: tokens/s, memory, times, and any metric a result adds) but the losses
    (:data:`LOSS_METRICS`), then each task's ``seconds_<task>``."""
    from titanflow.history_row import METRICS  # lazy: pandas (via titanflow.history_row), which prune does without

    return [*(m for m in METRICS if m not in LOSS_METRICS), *sorted(c for c in row if c.startswith("seconds_"))]


def baselines_dir(history_dir: Path | str | None = None) -> Path:
    """``<history>/baselines`` (the history folder: ``history_dir``, else $TITANFLOW_HISTORY or history/).

    Raises:
        BaselineError: the history folder is a file.
    """
    history = Path(history_dir) if history_dir is not None else paths.history_root()
    if history.exists() and not history.is_dir():
        raise BaselineError(f"history_dir: {history} is a file; fix: pass the history folder (the one that holds "
                            "runs.parquet)")
    return history / BASELINES


def _read(path: Path) -> NodeBaseline:
    """The baseline in ``path``.

    Raises:
        BaselineError: the file does not read as a baseline (names it, and the fix: move it aside).
    """
    try:
        return NodeBaseline.model_validate_json(path.read_text())
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0]
        raise BaselineError(f"baseline: {path} does not read as a baseline ({first}); fix: move it aside, e.g. "
                            f"mv {path} {path}.unreadable, and promote a run again") from None


class NodeBaseline(BaseModel):
    """One promoted run: the workload it stands for (``scenario``, ``target``, ``init``, ``config_key``: its
    parameters' key, titanflow.judge.workload; ``weights``: the weights given, None for the embedded model), the
    ``hardware`` it ran on (titanflow.judge.environment.hardware), its ``losses`` ({step: nats}), its ``performance``
    figures ({history column: value}), the environment (``environment_key``, ``environment``, ``stack_digest``,
    ``stack``: titanflow.judge.environment), and ``run_id``, ``promoted_at`` (UTC) and ``why``."""

    scenario: str
    target: str
    init: str
    config_key: str
    weights: str | None
    hardware: str
    losses: dict[int, float]
    performance: dict[str, float] = Field(default_factory=dict)
    environment_key: str | None = None
    environment: dict | None = None
    stack_digest: str | None = None
    stack: dict | None = None
    run_id: str
    promoted_at: datetime
    why: str

    @property
    def key(self) -> str:
        """The file stem: workload x hardware (module docstring)."""
        return workload_key(self.scenario, self.target, self.init, self.config_key, self.hardware)


def workload_key(scenario: str, target: str, init: str, config_key: str, hardware: str) -> str:
    """``<scenario>-<target>-<init>-<config_key>-<8 hex digits of hardware>``."""
    return f"{scenario}-{target}-{init}-{config_key}-{hashlib.sha256(hardware.encode()).hexdigest()[:8]}"


class BaselineError(ValueError):
    """A run cannot be promoted, or no baseline has the key given; the message names the field and the fix."""


def promote(row: dict, summary: dict, why: str, history_dir: Path | str | None = None
            ) -> tuple[NodeBaseline, Path | None]:
    """Make the run of history ``row`` (its summary.json as ``summary``) the baseline of its workload on its hardware,
    replacing one promoted before (moved to retired/, kept). Written whole under a temporary name, then renamed.
    Returns (the baseline, where the one it replaced was kept: None when there was none).

    Raises:
        BaselineError: the run did not pass, logged no loss or has no recorded hardware, or ``why`` is empty.
    """
    if row.get("verdict") != "pass":
        raise BaselineError(f"run_id: {row['run_id']} ended {row.get('verdict')}; fix: promote a run that passed")
    losses = [float(x) for x in (row.get("losses") if row.get("losses") is not None else [])]
    if not losses or not all(map(math.isfinite, losses)):
        raise BaselineError(f"run_id: {row['run_id']} has no finite loss curve; fix: promote a run that trained")
    if not row.get("hardware"):
        raise BaselineError(f"run_id: {row['run_id']} was recorded before titanflow kept its hardware; fix: promote "
                            "a run made since")
    if not why.strip():
        raise BaselineError("why: missing; fix: say why this run is the baseline: --why TEXT")
    parameters = json.loads(row.get("parameters") or "{}")
    performance = {c: float(row[c]) for c in performance_columns(row)
                   if row.get(c) is not None and not _missing(row[c])}
    baseline = NodeBaseline(
        scenario=row["scenario"], target=row["target"], init=row["init"], config_key=row["config_key"],
        weights=parameters.get("weights"), hardware=row["hardware"],
        losses={step: loss for step, loss in enumerate(losses, start=1)}, performance=performance,
        environment_key=row.get("environment_key"), environment=summary.get("environment"),
        stack_digest=row.get("stack_digest"), stack=summary.get("stack"), run_id=row["run_id"],
        promoted_at=datetime.now(timezone.utc), why=why.strip())
    folder = baselines_dir(history_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{baseline.key}.json"
    replaced = retire(baseline.key, history_dir) if path.exists() else None
    paths.write_atomic(path, baseline.model_dump_json(indent=1) + "\n", what="the baseline")
    return baseline, replaced


def _missing(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def listed(history_dir: Path | str | None = None) -> list[NodeBaseline]:
    """Every baseline in force, by key."""
    folder = baselines_dir(history_dir)
    return [_read(p) for p in sorted(folder.glob("*.json"))]


def show(key: str, history_dir: Path | str | None = None) -> NodeBaseline:
    """The baseline ``key``.

    Raises:
        BaselineError: none has that key (the message lists the keys there are).
    """
    path = baselines_dir(history_dir) / f"{key}.json"
    if not path.is_file():
        keys = [b.key for b in listed(history_dir)]
        there = f"pass one of: {', '.join(keys)}" if keys else "there is none in force; promote a run first"
        raise BaselineError(f"key: no baseline {key!r} in force; fix: {there} (titanflow golden list; retired ones "
                            f"are kept in {baselines_dir(history_dir) / 'retired'})")
    return _read(path)


def retire(key: str, history_dir: Path | str | None = None) -> Path:
    """Move the baseline ``key`` to ``baselines/retired/<key>-<UTC time>.json`` (kept, no longer in force); returns
    where it went.

    Raises:
        BaselineError: none has that key.
    """
    show(key, history_dir)
    folder = baselines_dir(history_dir)
    retired = folder / "retired" / f"{key}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}.json"
    retired.parent.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").rename(retired)
    return retired


def baseline_for(row: dict, history_dir: Path | str | None = None) -> NodeBaseline | None:
    """The baseline in force for the workload and hardware of history ``row``; None where there is none (or the row
    has no recorded hardware)."""
    if not row.get("hardware") or not row.get("config_key"):
        return None
    return _in_force(workload_key(row["scenario"], row["target"], row["init"], row["config_key"], row["hardware"]),
                     history_dir)


def baseline_of_run(parameters: dict, environment: dict | None, history_dir: Path | str | None = None
                    ) -> NodeBaseline | None:
    """The baseline in force for a run not yet in the history: its ``parameters`` (titanflow.params.ScenarioRun as
    validated, model_dump) and numerics ``environment`` (titanflow.judge.environment.numerics_environment) give the
    workload and hardware the history row will have; None where there is none (or no environment)."""
    machine = hardware(node_of(parameters["target"]), environment)
    if machine is None:
        return None
    return _in_force(workload_key(parameters["scenario"], parameters["target"], parameters["init"],
                                  config_key(parameters), machine), history_dir)


def _in_force(key: str, history_dir: Path | str | None) -> NodeBaseline | None:
    path = baselines_dir(history_dir) / f"{key}.json"
    return _read(path) if path.is_file() else None


def same_environment(node: NodeBaseline, environment_key: str | None, stack_digest: str | None) -> bool:
    """Whether a run computes in the baseline's environment (the exact lane): the same numerics environment
    (titanflow.judge.environment.environment_key) and installed stack digest; otherwise the band lane."""
    return environment_key == node.environment_key and stack_digest == node.stack_digest
