"""titanflow bisect on the planted-lr regression: a scratch repository holding this repository's files (its working
tree, committed as the good revision), then 4 commits, each a line of docs/chain.md except number 3, which raises
the default learning rate of titanflow/params.py from 8e-4 to 3e-3. Every probe is a real native cpu run of
:data:`PROBE_STEPS` steps of its revision's own code, in a worktree of its own, as a subflow run of the bisect on the
session's Prefect server, judged by the golden_curve rule over the steps it shares with the 10-step golden. Four
trainings: the two endpoints, then the ceil(log2(4)) = 2 revisions git bisect asks for (the chain is kept short).
The probe table and the wall time are printed (``-s``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.bisect_runs import LR_LINE, PLANTED_LR_LINE, chain, commit, copy_tracked, git

from titanflow.bisect.record import read_bisects
from titanflow.bisect.search import BisectResult
from titanflow.bisect.verdict import Check
from titanflow.paths import REPO_ROOT
from titanflow.record.history import read_history

TITANFLOW = Path(sys.executable).parent / "titanflow"
PLANT_AT, COMMITS = 3, 4
PLANT_MESSAGE = "Raise the default learning rate to 3e-3\n\nTrains faster on the tiny model."
#: Steps each probe trains: the planted lr parts from the golden after the first update (0.029 nats at step 2), but
#: by more than the golden_curve rule's band (0.2: the margin on a machine of other numerics) only at step 4 (0.295,
#: helpers/bisect_runs.PLANTED_LR_LOSSES); 4 steps of the default warm-up share all 4 losses with the 10-step golden
#: (titan_cfg.lr_schedule), so the rule judges every one.
PROBE_STEPS = 4


@pytest.fixture()
def planted_repo(tmp_path):
    """(repository, [good, chain 1, ..., chain COMMITS])."""
    repo = copy_tracked(REPO_ROOT, tmp_path / "repo")
    git(repo, "init", "-q")
    good = commit(repo, "good: titanflow as it is")
    params = (repo / "titanflow" / "params.py").read_text()
    assert params.count(LR_LINE) == 1  # the default the plant changes
    hashes = chain(repo, COMMITS, plant_at=PLANT_AT, plant_message=PLANT_MESSAGE,
                   plant={"titanflow/params.py": params.replace(LR_LINE, PLANTED_LR_LINE)})
    return repo, [good, *hashes]


def _subflow_runs(api_url: str, flow_run_id: str) -> dict:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId

    with SyncPrefectClient(api_url) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        bisect_run = client.read_flow_run(flow_run_id)
        artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {"children": {str(r.id): r for r in children}, "bisect": bisect_run, "artifacts": artifacts}


def test_the_planted_learning_rate_is_found_in_log2_n_probes(planted_repo, tmp_path, prefect_api):
    repo, hashes = planted_repo
    start = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "bisect", "native", "--good", hashes[0], "--bad", hashes[-1],
                           "--target", "cpu", "--init", "random", "--steps", str(PROBE_STEPS), "--repo", str(repo),
                           "--runs-dir", str(tmp_path / "bisects")], check=False, capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "PREFECT_API_URL": prefect_api})
    wall_s = time.monotonic() - start
    print(f"\n{proc.stdout}\ntitanflow bisect: {wall_s:.0f} s wall")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (folder,) = (tmp_path / "bisects").glob("bisect-native-cpu-random-*")
    result = BisectResult.model_validate_json((folder / "bisect.json").read_text())

    # the planted commit, its message, in ceil(log2(4)) = 2 probes of git bisect after the two endpoints
    assert result.status == "found" and result.first_bad == hashes[PLANT_AT]
    assert result.first_bad_message == PLANT_MESSAGE
    assert result.check == Check(failure_class="numerics", check="golden_curve losses")
    assert result.steps_taken == math.ceil(math.log2(COMMITS)) == 2 and len(result.probes) == 4
    assert [(p.role, p.revision) for p in result.probes[:2]] == [("bad", hashes[-1]), ("good", hashes[0])]
    # each probe's verdict is what the plant implies, and each ran its own revision's code
    runs = read_history(history_dir=folder / "history").set_index("run_id")
    good_curve = result.probes[1].losses
    for p in result.probes:
        planted = hashes.index(p.revision) >= PLANT_AT
        assert p.verdict == ("bad" if planted else "good"), p
        assert (p.failure_class, p.checks) == (("numerics", ["golden_curve losses"]) if planted else (None, []))
        assert len(p.losses) == PROBE_STEPS and p.losses[0] == good_curve[0]  # step 1: the loss before any update
        # lr 3e-3 parts from 8e-4 after the first update, by more than the golden_curve rule's 0.02 nats
        assert abs(p.losses[1] - good_curve[1]) > 0.02 if planted else p.losses == good_curve
        assert abs(p.losses[3] - good_curve[3]) > 0.2 if planted else True  # beyond the band too
        row = runs.loc[p.run_id]
        assert row.git_commit == p.revision and json.loads(row.parameters)["lr"] == (3e-3 if planted else 8e-4)
    assert f"# first bad commit: [{hashes[PLANT_AT]}]" in result.bisect_log

    # Prefect: the probes' flow runs are subflow runs of the bisect's, named by revision; the artifact says it
    found = _subflow_runs(prefect_api, result.flow_run_id)
    assert found["bisect"].state.name == "Completed"
    assert set(found["children"]) == {p.flow_run_id for p in result.probes}
    for p in result.probes:
        child = found["children"][p.flow_run_id]
        assert child.name == p.revision[:12] and child.state.name == ("Failed" if p.verdict == "bad" else "Completed")
    (artifact,) = [a for a in found["artifacts"] if a.key == "bisect-native-cpu-random"]
    assert f"First bad commit `{hashes[PLANT_AT]}`" in artifact.data

    # the history keeps the bisect; nothing is left of the worktrees
    (row,) = read_bisects().query(f"bisect_id == '{result.bisect_id}'").itertuples()
    assert (row.status, row.first_bad, row.bisect_probes) == ("found", hashes[PLANT_AT], result.steps_taken)
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not (folder / "worktrees").exists() or not any((folder / "worktrees").iterdir())
    print(f"probes (s): {[round(p.wall_s) for p in result.probes]}; bisect wall {result.wall_s:.0f} s")
