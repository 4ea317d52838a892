"""One probe: a ``qwen3-scenario`` run of one revision, with that revision's own code, in a worktree of its own.

    folder = BisectFolder(Path("runs/bisect-native-cpu-random-20261201-104500-ab12"))
    run = run_probe(repo, revision, folder, {"scenario": "native", "target": "cpu", "init": "random"},
                    scenario_flow=qwen3_scenario, api_url=api_url, timeout_s=7200)

The probe's flow run is created here, on the bisect's Prefect server, as a subflow run of the task that
called it (:func:`create_probe_flow_run`), named by the revision's short hash; then
the revision's worktree executes it as Prefect's workers do: ``<python> -m prefect.engine`` with
``PREFECT__FLOW_RUN_ID`` and ``PREFECT__FLOW_ENTRYPOINT`` (:data:`ENTRYPOINT`), run in the worktree, whose
code comes first on ``sys.path``. So the UI shows each probe under the bisect's flow run, and the run is
judged by the revision's own goldens and rules. The probe's process gets:

- ``TITANFLOW_CACHE``: the caller's cache root (titanflow.paths.cache_root), so built assets and compile
  caches are reused across worktrees instead of being built again in each;
- ``TITANFLOW_RUNS``, ``TITANFLOW_HISTORY``: the bisect's folder (``runs/``, ``history/``), so runs of old
  revisions never become baselines of the nightly's history;
- the Python of its dependencies (titanflow.bisect.environment).

It runs through titanflow.launch.process.run_streaming: its output in ``probes/<hash>.log``, its process group
ended on timeout or when the bisect is stopped. The worktree is removed when the probe ends, whatever happened.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from prefect import Flow, Task, get_client
from prefect.client.schemas.objects import TaskRunResult
from prefect.context import FlowRunContext, TaskRunContext
from prefect.states import Pending
from pydantic import BaseModel, ValidationError

from titanflow import paths
from titanflow.bisect.environment import EnvironmentUnavailable, dependency_key, ensure_environment, plan_environment
from titanflow.bisect.overlay import ensure_overlay
from titanflow.bisect.revisions import file_at, worktree
from titanflow.launch.metrics import log_tail
from titanflow.launch.process import run_streaming
from titanflow.record.history import LOG_TAIL_LINES
from titanflow.record.summary import SUMMARY, RunSummary, read_summary

#: The scenario flow, as the deployments name it (deployments/prefect.yaml), relative to the worktree.
ENTRYPOINT = "flows/scenario.py:qwen3_scenario"

#: Lines of the probe's own output kept to say why a probe ended without a summary.
OUTPUT_TAIL_LINES = 30


class BisectFolder:
    """A bisect's folder: ``worktrees/`` (one per probe while it runs, and git's bisect state), ``runs/`` and
    ``history/`` (the probes' run folders and history), ``probes/`` (each probe's output)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.worktrees, self.runs = self.root / "worktrees", self.root / "runs"
        self.history, self.logs = self.root / "history", self.root / "probes"


class ProbeRun(BaseModel):
    """How a probe ended: its run's summary (None when it wrote none), the end of its train.log, and, for a run
    without a summary, ``why`` (the exit status and the last lines of the probe's output)."""

    revision: str
    run_id: str
    run_dir: str
    flow_run_id: str | None
    environment: str
    summary: RunSummary | None
    log_tail: str = ""
    why: str | None = None
    wall_s: float


def probe_run_id(parameters: dict, revision: str) -> str:
    """``<scenario>-<target>-<init>-<12 hex of the revision>`` (or of a probe's label): the probe's run folder in
    the bisect's ``runs/``."""
    return f"{parameters['scenario']}-{parameters['target']}-{parameters['init']}-{revision[:12]}"


def probe_environment(tree: Path, folder: BisectFolder, api_url: str, flow_run_id: str,
                      overlay: Path | None = None) -> dict[str, str]:
    """The probe process's environment: this one, with the variables of the module docstring, the worktree first on
    ``PYTHONPATH`` and then ``overlay`` (titanflow.bisect.overlay) when given."""
    python_path = [str(tree), *([str(overlay)] if overlay else []),
                   *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PREFECT_API_URL": api_url, "PREFECT__FLOW_RUN_ID": flow_run_id,
            "PREFECT__FLOW_ENTRYPOINT": ENTRYPOINT, "TITANFLOW_CACHE": str(paths.cache_root()),
            "TITANFLOW_RUNS": str(folder.runs), "TITANFLOW_HISTORY": str(folder.history),
            "PYTHONPATH": os.pathsep.join(python_path)}


def create_probe_flow_run(scenario_flow: Flow, parameters: dict, revision: str, *, name: str | None = None,
                          tags: list[str] | None = None) -> str:
    """Create the probe's ``qwen3-scenario`` flow run (Pending), named by the revision's short hash; returns its id.
    ``name`` and ``tags`` replace the revision's (a canary's run: titanflow.canary.side_run); ``revision`` stays the
    key of the task run standing for it.

    Called in a flow run, it is made a subflow run of it the way Prefect's own ``run_deployment(as_subflow=True)``
    does: a task run standing for it is created in the calling flow run first, through the API (a task's own run is
    recorded from events, maybe not yet when the flow run that names it as parent is created), with the calling
    task run (the probe task) as its parent, so the UI draws the probe's run under that task.
    """
    flow_run_ctx, task_run_ctx = FlowRunContext.get(), TaskRunContext.get()
    with get_client(sync_client=True) as client:
        parent_id = None
        if flow_run_ctx is not None and flow_run_ctx.flow_run is not None:
            stands_for = Task(name=scenario_flow.name, fn=lambda: None)
            stands_for.task_key = f"{__name__}.{scenario_flow.name}"
            parents = {"__parents__": [TaskRunResult(id=task_run_ctx.task_run.id)]} if task_run_ctx else {}
            parent_id = client.create_task_run(task=stands_for, flow_run_id=flow_run_ctx.flow_run.id,
                                               dynamic_key=revision, task_inputs=parents, state=Pending()).id
        flow_run = client.create_flow_run(scenario_flow, name=name or revision[:12], parameters=parameters,
                                          parent_task_run_id=parent_id,
                                          tags=tags if tags is not None else ["bisect", f"revision:{revision[:12]}"])
    return str(flow_run.id)


def flow_run_state(flow_run_id: str) -> str:
    """``flow run <state name>: <its message>`` as the Prefect API has it (``python -m prefect.engine`` exits 0 also
    after a flow run that failed)."""
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
    return f"flow run {state.name}: {state.message}" if state else "flow run without a state"


def run_probe(repo: Path, revision: str, folder: BisectFolder, parameters: dict, *, scenario_flow: Flow,
              api_url: str, timeout_s: float, label: str | None = None, pins: dict[str, str] | None = None,
              pip_options: list[str] | None = None) -> ProbeRun:
    """Run ``parameters`` (scenario, target, init, steps: the scenario flow's) at ``revision`` (module docstring);
    ``timeout_s`` bounds the whole probe process. ``pins`` (a bisect over environments): the packages laid over the
    revision's environment, installed with ``pip_options`` (titanflow.bisect.overlay), and ``label`` names the probe
    (its run id's end, its log and flow run) instead of the revision's short hash. Never raises for the probe's own failure (an install that fails,
    a crash, a timeout: a run without a summary, ``why`` says so); a stop of the bisect (Ctrl-C, a cancel)
    ends the probe's processes and is raised."""
    start = time.monotonic()
    name = label or revision[:12]
    run_id = probe_run_id(parameters, revision) if label is None else probe_run_id(parameters, label)
    run_dir = folder.runs / run_id
    flow_run_id, why, overlay = None, None, None
    with worktree(repo, folder.worktrees / name, revision) as tree:
        plan = plan_environment(dependency_key(lambda path: file_at(repo, revision, path)), parameters["target"])
        try:
            python = ensure_environment(plan, tree)
            overlay = ensure_overlay(pins, pip_options or []) if pins is not None else None
        except EnvironmentUnavailable as err:
            why = str(err)
        if why is None:
            flow_run_id = create_probe_flow_run(scenario_flow, {**parameters, "run_id": run_id,
                                                                "runs_dir": str(folder.runs)}, name)
            ended = run_streaming([python, "-m", "prefect.engine"], cwd=tree, timeout_s=timeout_s,
                                  env=probe_environment(tree, folder, api_url, flow_run_id, overlay),
                                  log_path=folder.logs / f"{name}.log", tail_lines=OUTPUT_TAIL_LINES)
            timed_out = f"killed after the {timeout_s:.0f} s timeout, " if ended.timed_out else ""
            why = (f"{flow_run_state(flow_run_id)}; {timed_out}exit {ended.returncode}; last lines:\n"
                   + "\n".join(ended.tail))
    summary = None
    if (run_dir / SUMMARY).is_file():
        try:
            summary = read_summary(run_dir / SUMMARY)
        except ValidationError as err:  # written by a revision whose summary this code cannot read
            why = f"{run_dir / SUMMARY} is not a summary this titanflow reads: {err}"
    return ProbeRun(revision=revision, run_id=run_id, run_dir=str(run_dir), flow_run_id=flow_run_id,
                    environment=plan.describe() + (f" + overlay {overlay.name}" if overlay else ""), summary=summary,
                    log_tail=log_tail(run_dir / "train.log", LOG_TAIL_LINES) or "",
                    why=None if summary is not None else why, wall_s=round(time.monotonic() - start, 3))
