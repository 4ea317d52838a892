"""The ``qwen3-canary`` flow: the nightly's suite on a profile's successor beside the pinned profile, one report.

    profile -> (pinned, successor) venvs -> each venv's stack -> per scenario x init: a qwen3-scenario run on
    each side -> artifact canary-<profile>, <folder>/canary.json and canary.md

The sides and their venvs come from ``profiles/`` (titanflow.successor: ``profiles/<p>/successor`` or
``profiles/<p>-next/``; ``$TITANFLOW_VENV_<NAME>`` or the Makefile's venvs); each run is a ``qwen3-scenario``
subflow run executed by its side's Python in this checkout (titanflow.canary.side_run), with its own runs and
history folders under the canary's folder ``<runs_dir>/canary-<profile>-<target>-<UTC time>-<4 hex>``. So the
nightly's history, baselines, trends and retention never see a canary run, and the nightly's alerts
(titanflow.prefect_ops.alerts: automations on the flow ``qwen3-nightly`` and its own event) never fire for one.
A canary reports and never fails for what its runs do: it ends Completed, its message the headline (how many
packages differ, how many runs changed verdict); only bad input (a profile without a successor or venv, a bad
scenario parameter, no Prefect API) fails it, before anything runs.
"""

from __future__ import annotations

import datetime
import re
import secrets
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_API_URL
from prefect.states import Completed, State

from titan_cfg.job import Init
from titanflow.canary.compare import CanaryResult, CanaryRow, SideFigures, canary_markdown, figures, headline
from titanflow.canary.side_run import SideRun
from titanflow.successor import canary_sides
from titanflow.flows.scenario import qwen3_scenario
from titanflow.judge.environment import stack_difference
from titanflow.params import ScenarioName, TargetName
from titanflow.paths import runs_root, write_atomic
from titanflow.prefect_ops.stopped import cancelled_not_crashed
from titanflow.run.nightly_plan import nightly_runs
from titanflow.tasks.canary import canary_run, canary_stack

#: The canary's record and report in its folder.
RESULT_FILE, REPORT_FILE = "canary.json", "canary.md"
#: Seconds one side's run may take, every retry of its training included.
RUN_TIMEOUT_S = 7200.0


def new_canary_id(profile: str, target: str) -> str:
    """``canary-<profile>-<target>-<UTC time>-<4 hex>``: the canary's folder name, sortable and unique."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"canary-{profile}-{target}-{stamp}-{secrets.token_hex(2)}"


def artifact_key(profile: str) -> str:
    """``canary-<profile>``, as a Prefect artifact key (lower-case letters, digits and dashes)."""
    return "canary-" + re.sub(r"[^a-z0-9-]", "-", profile.lower())


def _side_figures(state, run_dir: str) -> SideFigures:
    """A side's figures from its task's final state; a task that raised shows its message."""
    if state.is_completed():
        return figures(state.result())
    return figures(SideRun(role="", profile="", scenario="", init="", run_id="", run_dir=run_dir, flow_run_id=None,
                           summary=None, why=f"{state.name}: {state.message}", wall_s=0.0))


@flow(name="qwen3-canary", on_crashed=[cancelled_not_crashed])
def qwen3_canary(
    profile: str = "cpu-lowest",
    target: TargetName = "cpu",
    scenarios: list[ScenarioName] | None = None,
    inits: list[Init] | None = None,
    steps: int | None = None,
    lr: float | None = None,
    nproc_per_node: int | None = None,
    runs_dir: str | None = None,
    canary_id: str | None = None,
) -> State:
    """Run the nightly's suite of ``target`` on ``profile`` and on its successor (module docstring); ``steps``,
    ``lr`` and ``nproc_per_node`` override every run's (None: ScenarioRun's defaults). Returns Completed, the
    headline its message, whatever the runs' verdicts.

    Raises:
        ValueError: before anything runs: ``profile`` names no successor or a bad one, a side has no venv
            (titanflow.successor.canary_sides), a bad scenario parameter (titanflow.run.nightly_plan), no
            Prefect API the runs' processes can reach, or a ``canary_id`` whose folder exists.
    """
    pinned, successor = canary_sides(profile)
    suite = nightly_runs(target, scenarios, inits, steps=steps, lr=lr, nproc_per_node=nproc_per_node)
    api_url = PREFECT_API_URL.value()
    if not api_url:
        raise ValueError("PREFECT_API_URL: unset; each side runs in a process of its own that reports to the "
                         "canary's server: start one (make server) and export the URL it prints")
    folder = Path(runs_dir or runs_root()) / (canary_id or new_canary_id(profile, target))
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        raise ValueError(f"canary_id: {folder} exists; fix: pass another canary_id, or none") from None
    logger = get_run_logger()
    result = CanaryResult(canary_id=folder.name, folder=str(folder), target=target, pinned=pinned,
                          successor=successor, started_at=datetime.datetime.now(datetime.UTC))
    stacks = [canary_stack(side, str(folder), return_state=True) for side in (pinned, successor)]
    if all(state.is_completed() for state in stacks):
        result.packages = stack_difference(stacks[0].result(), stacks[1].result())
    else:
        result.stack_error = "; ".join(state.message or state.name for state in stacks if not state.is_completed())
    logger.info("%s -> %s: %d package(s) differ", pinned.profile, successor.profile, len(result.packages))
    for params, run in suite:
        states = [canary_run(side, str(folder), params, qwen3_scenario, api_url, RUN_TIMEOUT_S, return_state=True)
                  for side in (pinned, successor)]
        result.rows.append(CanaryRow(scenario=run.scenario, init=run.init,
                                     pinned=_side_figures(states[0], str(folder / pinned.role)),
                                     successor=_side_figures(states[1], str(folder / successor.role))))
    result.finished_at = datetime.datetime.now(datetime.UTC)
    write_atomic(folder / RESULT_FILE, result.model_dump_json(indent=2) + "\n")
    write_atomic(folder / REPORT_FILE, canary_markdown(result))
    create_markdown_artifact(key=artifact_key(profile), markdown=canary_markdown(result),
                             description=f"canary: {pinned.profile} beside its successor {successor.profile}")
    logger.info("%s", headline(result))
    return Completed(message=headline(result))
