"""One side of a canary: a ``qwen3-scenario`` run in the venv of one profile, or that venv's installed stack.

    run = run_side(side, folder, {"scenario": "native", "target": "cpu", "init": "random", "steps": 2},
                   scenario_flow=qwen3_scenario, api_url=api_url, timeout_s=7200)

The run's flow run is created on the canary's Prefect server as a subflow run of the task that calls this
(titanflow.bisect.probe.create_probe_flow_run: named ``<role>-<profile>-<scenario>-<init>``, tagged ``canary``),
then executed as Prefect's workers do, ``<the venv's python> -m prefect.engine``, in this checkout (first on
``PYTHONPATH``: both sides run this code; only the installed stack differs). The process gets the side's own
``TITANFLOW_RUNS`` and ``TITANFLOW_HISTORY`` under the canary's folder, so no canary run is ever judged against, or
appended to, the nightly's history and baselines, and the caller's ``TITANFLOW_CACHE``, so built assets are reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from prefect import Flow
from pydantic import BaseModel, ValidationError

from titanflow import paths
from titanflow.bisect.probe import ENTRYPOINT, create_probe_flow_run, flow_run_state
from titanflow.successor import CanarySide
from titanflow.launch.process import run_streaming
from titanflow.record.summary import SUMMARY, RunSummary, read_summary

#: Lines of a run's own output kept to say why it ended without a summary.
OUTPUT_TAIL_LINES = 30

#: What a side's Python prints: the installed stack as every run records it (titanflow.judge.environment).
STACK_SCRIPT = "import json; from titanflow.judge.environment import installed_stack; print(json.dumps(installed_stack()))"


class CanaryFolder:
    """A canary's folder: ``<role>/runs`` and ``<role>/history`` per side, ``logs/`` (each run's output),
    ``canary.json`` and ``canary.md``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.logs = self.root / "logs"

    def runs(self, role: str) -> Path:
        """The side's runs folder: ``<root>/<role>/runs``."""
        return self.root / role / "runs"

    def history(self, role: str) -> Path:
        """The side's history folder: ``<root>/<role>/history``."""
        return self.root / role / "history"


class SideRun(BaseModel):
    """How one side's run ended: its summary (None when it wrote none, ``why`` then says why) and wall seconds."""

    role: str
    profile: str
    scenario: str
    init: str
    run_id: str
    run_dir: str
    flow_run_id: str | None
    summary: RunSummary | None
    why: str | None = None
    wall_s: float


def side_environment(side: CanarySide, folder: CanaryFolder, **extra: str) -> dict[str, str]:
    """The environment of a process of ``side``: this one, the side's venv first on ``PATH`` (``VIRTUAL_ENV``), this
    checkout first on ``PYTHONPATH``, the side's runs and history folders, this cache root, and ``extra``."""
    python_path = [str(paths.REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "VIRTUAL_ENV": side.venv,
            "PATH": os.pathsep.join([str(Path(side.venv) / "bin"), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(python_path), "TITANFLOW_CACHE": str(paths.cache_root()),
            "TITANFLOW_RUNS": str(folder.runs(side.role)), "TITANFLOW_HISTORY": str(folder.history(side.role)),
            **extra}


def side_stack(side: CanarySide, folder: CanaryFolder, timeout_s: float = 120) -> dict:
    """The installed stack of ``side``'s venv (titanflow.judge.environment.installed_stack, run by its Python).

    Raises:
        RuntimeError: its Python fails or prints no JSON (the end of its output on the message).
    """
    done = subprocess.run([side.python, "-c", STACK_SCRIPT], cwd=paths.REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout_s, env=side_environment(side, folder))
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"{side.python}: no stack (exit {done.returncode}): {done.stderr[-2000:]}") from None


def run_side(side: CanarySide, folder: CanaryFolder, parameters: dict, *, scenario_flow: Flow, api_url: str,
             timeout_s: float) -> SideRun:
    """Run ``parameters`` (scenario, target, init, ...: the scenario flow's) on ``side`` (module docstring);
    ``timeout_s`` bounds the process. Never raises for the run's own failure (a crash, a timeout: no summary,
    ``why`` says so); a stop of the canary ends the run's processes and is raised."""
    start = time.monotonic()
    run_id = f"{parameters['scenario']}-{parameters['target']}-{parameters['init']}-{side.role}"
    runs = folder.runs(side.role)
    name = f"{side.role}-{side.profile}-{parameters['scenario']}-{parameters['init']}"
    flow_run_id = create_probe_flow_run(scenario_flow, {**parameters, "run_id": run_id, "runs_dir": str(runs)},
                                        name, name=name, tags=["canary", f"profile:{side.profile}"])
    ended = run_streaming([side.python, "-m", "prefect.engine"], cwd=paths.REPO_ROOT, timeout_s=timeout_s,
                          env=side_environment(side, folder, PREFECT_API_URL=api_url, PREFECT__FLOW_RUN_ID=flow_run_id,
                                               PREFECT__FLOW_ENTRYPOINT=ENTRYPOINT),
                          log_path=folder.logs / f"{name}.log", tail_lines=OUTPUT_TAIL_LINES)
    timed_out = f"killed after the {timeout_s:.0f} s timeout, " if ended.timed_out else ""
    why = f"{flow_run_state(flow_run_id)}; {timed_out}exit {ended.returncode}; last lines:\n" + "\n".join(ended.tail)
    summary = None
    if (runs / run_id / SUMMARY).is_file():
        try:
            summary = read_summary(runs / run_id / SUMMARY)
        except ValidationError as err:
            why = f"{runs / run_id / SUMMARY} is not a summary this titanflow reads: {err}"
    return SideRun(role=side.role, profile=side.profile, scenario=parameters["scenario"], init=parameters["init"],
                   run_id=run_id, run_dir=str(runs / run_id), flow_run_id=flow_run_id, summary=summary,
                   why=None if summary is not None else why, wall_s=round(time.monotonic() - start, 3))
