"""Golden loss curves: where they live, how they are written and read, and which one applies to a run.

One plain-text file per (scenario, target, init), ``goldens/loss_curves/<scenario>-<target>-<init>.curve.csv`` (and
``...-walkthrough.curve.csv`` for the walkthrough mode):
``#`` lines saying how and with which workload the curve was recorded (``config_key``, the hash of
titanflow.judge.workload.CONFIG_KEY_FIELDS, and the ``warmup_steps`` it trained with), in which numerics environment (``environment``:
titanflow.judge.environment) and, for pretrained init, from which checkpoint (``weights_digest``:
titanflow.weights.digest), then ``step,loss`` rows. The goldens are those of the embedded weights
(``weights`` None). Three readers use :func:`golden_for`:

- the loss verdict (titanflow.judge.loss): step 1 is the pretrained first-step expectation, whatever
  the run's steps;
- the ``golden_curve`` regression rule (titanflow.judge.regression): every step, only when the run
  has the curve's workload (:meth:`GoldenCurve.same_workload`), or the leading steps a shorter run of that workload
  shares with it (:meth:`GoldenCurve.shared_steps`: a 4-step run of the default warm-up, all 4); within the rule's margin when the
  run also has the curve's environment and checkpoint (:meth:`GoldenCurve.same_numerics`), else
  within the band measured across environments;
- the report's loss plot, under the same condition.

Record them again after an intended change with
``TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/e2e/test_scenarios.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from titan_cfg.lr_schedule import shared_loss_steps
from titan_cfg.targets import node_of
from titanflow.judge import workload
from titanflow.judge.environment import environment_key as environment_key_of
from titanflow.paths import REPO_ROOT

#: Every golden of the repository: loss curves and trn2 renders.
GOLDEN_ROOT = REPO_ROOT / "goldens"
#: Golden loss curves, one per (scenario, target, init).
GOLDEN_DIR = GOLDEN_ROOT / "loss_curves"
#: Golden renders of the trn2 jobs (tests/unit/launch/test_render.py pins them).
RENDER_DIR = GOLDEN_ROOT / "renders"

#: How to record the goldens again (named in every "no golden" message).
RECORD_COMMAND = "make goldens"


class GoldenCurve(BaseModel):
    """A recorded loss curve: ``losses`` {step: loss (nats)}, the ``config_key`` of its workload, the
    numerics ``environment`` it was recorded in and the ``weights_digest`` of the checkpoint it
    started from (pretrained init; None for random init and for curves recorded before either); ``warmup_steps``
    the warm-up it trained with (None for curves recorded before it was written)."""

    path: Path
    losses: dict[int, float]
    config_key: str | None
    environment: dict | None = None
    weights_digest: str | None = None
    warmup_steps: int | None = None

    @property
    def first_step_loss(self) -> float:
        """The loss at step 1 (nats): the pretrained first-step expectation."""
        return self.losses[1]

    def same_workload(self, config_key: str | None) -> bool:
        """True when the curve was recorded with the workload ``config_key`` names."""
        return self.config_key == config_key

    def shared_steps(self, parameters: dict) -> int:
        """How many leading steps a run of ``parameters`` (a ScenarioRun's fields) shares with this curve when it has
        the curve's workload but fewer steps: the losses its learning-rate schedule cannot yet tell from the curve's
        (titan_cfg.lr_schedule.shared_loss_steps). 0 when the run is not such a run, or the curve does not say
        the warm-up it trained with."""
        steps = len(self.losses)
        if self.warmup_steps is None or not 1 <= parameters.get("steps", 0) < steps \
                or workload.config_key({**parameters, "steps": steps}) != self.config_key:
            return 0
        return shared_loss_steps(parameters["steps"], workload.warmup_steps_of(parameters), steps, self.warmup_steps)

    def same_numerics(self, environment_key: str | None, weights_digest: str | None) -> bool:
        """True when a run with this environment key (titanflow.judge.environment.environment_key) and
        checkpoint digest computes the very same sums as the recording did, so the exact margin applies.
        A curve without a recorded environment matches nothing."""
        recorded = environment_key_of(self.environment)
        return (recorded is not None and recorded == environment_key
                and (self.weights_digest is None or self.weights_digest == weights_digest))


def curve_path(scenario: str, target: str, init: str, golden_dir: Path = GOLDEN_DIR,
               model_spec: str | None = "config") -> Path:
    """``<golden_dir>/<scenario>-<node>-<init>.curve.csv``, ``<node>`` the target's node type
    (titan_cfg.targets.Target.node: a target of cpu machines under another name shares cpu's curves; whether a curve
    applies to a run is then its workload's and numerics environment's say, :class:`GoldenCurve`); a run of the
    walkthrough mode (``model_spec`` "walkthrough", titan_cfg.scenarios.Scenario.walkthrough) has curves of its own,
    ``<scenario>-<node>-<init>-walkthrough.curve.csv``."""
    mode = "" if (model_spec or "config") == "config" else f"-{model_spec}"
    return Path(golden_dir) / f"{scenario}-{node_of(target)}-{init}{mode}.curve.csv"


def write_curve(path: Path, losses: list[float], config_key: str, parameters: dict, note: str,
                environment: dict | None = None, weights_digest: str | None = None,
                warmup_steps: int | None = None) -> Path:
    """Write a golden curve: ``#`` lines (note, config_key, parameters and environment as JSON, the
    weights digest, the warm-up steps), then ``step,loss`` rows.

    Raises:
        ValueError: an empty or non-finite curve (a golden must come from a healthy run).
    """
    if not losses or not all(math.isfinite(x) for x in losses):
        raise ValueError(f"losses: a golden curve needs finite losses for every step; got {losses}")
    header = [*note.splitlines(), f"config_key: {config_key}", f"parameters: {json.dumps(parameters, sort_keys=True)}"]
    if environment is not None:
        header.append(f"environment: {json.dumps(environment, sort_keys=True)}")
    if weights_digest is not None:
        header.append(f"weights_digest: {weights_digest}")
    if warmup_steps is not None:
        header.append(f"warmup_steps: {warmup_steps}")
    body = "".join(f"{step},{loss:.5f}\n" for step, loss in enumerate(losses, 1))
    path.write_text("".join(f"# {line}\n" for line in header) + "step,loss\n" + body)
    return path


def read_curve(path: Path) -> GoldenCurve:
    """The golden curve in ``path`` (:func:`write_curve`'s format).

    Raises:
        FileNotFoundError: no such file (the message says how to record one).
        ValueError: the table lacks ``step``/``loss`` columns.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no golden loss curve {path.name}; record one with {RECORD_COMMAND}")
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            fields.setdefault(key.strip(), value.strip())
    table = pd.read_csv(path, comment="#")
    if not {"step", "loss"} <= set(table.columns):
        raise ValueError(f"{path}: expected columns step,loss; got {list(table.columns)}")
    environment = fields.get("environment")
    return GoldenCurve(path=path, losses={int(s): float(x) for s, x in zip(table.step, table.loss)},
                       config_key=fields.get("config_key"),
                       environment=json.loads(environment) if environment else None,
                       weights_digest=fields.get("weights_digest"),
                       warmup_steps=int(fields["warmup_steps"]) if "warmup_steps" in fields else None)


def golden_for(scenario: str, target: str, init: str, weights: str | None,
               golden_dir: Path = GOLDEN_DIR, model_spec: str | None = "config") -> GoldenCurve | None:
    """The golden curve that applies to a run of (scenario, target, init) with ``weights`` in the mode
    ``model_spec`` (:func:`curve_path`).

    None for the user's own weights (the goldens are of the embedded weights, ``weights`` None)
    and when no curve was recorded for the triple.
    """
    path = curve_path(scenario, target, init, golden_dir, model_spec)
    if weights is not None or not path.is_file():
        return None
    return read_curve(path)
