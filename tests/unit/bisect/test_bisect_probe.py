"""One probe (titanflow.bisect.probe, the task tasks/probe.py) without training: a scratch repository whose
``flows/scenario.py`` is a stand-in ``qwen3-scenario`` that writes the summary.json of a passing run, with what its
process saw (working directory, environment) in the summary's ``environment``. The probe's flow run is created as
a subflow run of the probe task and run by ``python -m prefect.engine`` in the revision's worktree, as the real
one is (tests/e2e/test_bisect_runs.py trains)."""

import os
import shutil

import pytest
from helpers.bisect_runs import commit, git, scratch_repo

from titanflow import paths
from titanflow.bisect.environment import DEPENDENCY_FILES
from titanflow.bisect.probe import BisectFolder, probe_run_id

STAND_IN = '''
import json
import os
import sys
from pathlib import Path

from prefect import flow

REVISION = "{revision}"


@flow(name="qwen3-scenario")
def qwen3_scenario(scenario=None, target=None, init=None, steps=None, run_id=None, runs_dir=None):
    if REVISION == "crash":
        raise ImportError("the revision cannot import its trainer")
    seen = {{"cwd": os.getcwd(), "revision": REVISION, "sys_path_0": sys.path[0],
             **{{k: os.environ.get(k) for k in ("TITANFLOW_CACHE", "TITANFLOW_RUNS", "TITANFLOW_HISTORY",
                                                "PREFECT__FLOW_RUN_ID")}}}}
    folder = Path(runs_dir) / run_id
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({{
        "run_id": run_id, "scenario": scenario, "target": target, "init": init, "steps": steps or 10,
        "parameters": {{"steps": steps}}, "verdict": "pass", "environment": seen}}))
'''

PARAMETERS = {"scenario": "native", "target": "cpu", "init": "random", "steps": 3}


@pytest.fixture()
def revisions(tmp_path):
    """{"pass": hash, "crash": hash}: the stand-in flow, then one that raises, with this checkout's dependency
    files (so the probe reuses this Python)."""
    repo = scratch_repo(tmp_path / "repo")
    for name in DEPENDENCY_FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.REPO_ROOT / name, repo / name)
    found = {kind: commit(repo, kind, {"flows/scenario.py": STAND_IN.format(revision=kind)}) for kind in
             ("pass", "crash")}
    return repo, found


def _probe(repo, revision, folder):
    from prefect import flow
    from prefect.settings import PREFECT_API_URL

    from titanflow.flows.scenario import qwen3_scenario
    from titanflow.tasks.probe import probe

    @flow(name="bisect-stand-in")
    def caller():
        return probe(str(repo), revision, str(folder.root), PARAMETERS, qwen3_scenario, PREFECT_API_URL.value(), 300)

    state = caller(return_state=True)
    return state.state_details.flow_run_id, state.result()


def test_a_probe_runs_its_revision_in_its_worktree_as_a_subflow_run(prefect_server, revisions, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    repo, found = revisions
    folder = BisectFolder(tmp_path / "bisect")
    caller_id, run = _probe(repo, found["pass"], folder)
    assert run.summary.verdict == "pass" and run.why is None
    assert run.run_id == probe_run_id(PARAMETERS, found["pass"]) == f"native-cpu-random-{found['pass'][:12]}"
    tree = str(folder.worktrees / found["pass"][:12])
    assert run.summary.environment == {
        "cwd": tree, "revision": "pass", "sys_path_0": os.path.join(tree, "flows"),  # Prefect's script loader's
        "TITANFLOW_CACHE": str(paths.cache_root()), "TITANFLOW_RUNS": str(folder.runs),
        "TITANFLOW_HISTORY": str(folder.history), "PREFECT__FLOW_RUN_ID": run.flow_run_id}
    assert run.environment.startswith("this environment (")
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[caller_id])))
        (child,) = children
        stands_for = client.read_task_run(child.parent_task_run_id)
    assert (str(child.id), child.name, child.state.name) == (run.flow_run_id, found["pass"][:12], "Completed")
    # the run stands under the probe task (named by the revision) of the calling flow run, as the UI draws it
    (probe_task,) = stands_for.task_inputs["__parents__"]
    from titanflow.prefect_ops.drain import send_buffered

    send_buffered()  # the probe task's own run is recorded from its events, sent in the background
    with get_client(sync_client=True) as client:
        assert client.read_task_run(probe_task.id).name == f"probe-{found['pass'][:12]}"
    assert child.parameters == {**PARAMETERS, "run_id": run.run_id, "runs_dir": str(folder.runs)}
    assert not (folder.worktrees / found["pass"][:12]).exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_probe_that_crashes_says_why_without_a_summary(prefect_server, revisions, tmp_path):
    repo, found = revisions
    folder = BisectFolder(tmp_path / "bisect")
    _, run = _probe(repo, found["crash"], folder)
    assert run.summary is None
    assert run.why.startswith("flow run Failed: Flow run encountered an exception: ImportError: the revision cannot "
                              "import its trainer; exit 0; last lines:\n")  # prefect.engine exits 0 after a failure
    assert (folder.logs / f"{found['crash'][:12]}.log").is_file()
    assert not (folder.worktrees / found["crash"][:12]).exists()
