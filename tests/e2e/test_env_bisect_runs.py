"""titanflow bisect over environments on a planted regression in a dependency: two local packages written as wheels
in tmp (helpers/local_wheels.py), planted-numerics 1.0 -> 1.1 (1.1: a .pth that runs at every interpreter start
and scales torch's learning rate LR_SCALE = 300 times at every optimizer step, in every rank) and zeta-tools
1.0 -> 2.0 (harmless; planted-numerics 1.1 requires it, so the bisect applies it first although its name sorts
after). Two constraints files, good and bad, over a scratch repository of this checkout's files (the revision
every probe runs). Every probe is a real native cpu run of :data:`PROBE_STEPS` steps in the venv with its
environment's overlay, judged by the golden_curve rule over the steps it shares with the 10-step golden. Three
trainings: the two endpoints, then the one environment the search asks for (zeta-tools 2.0 alone)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.bisect_runs import commit, copy_tracked, git
from helpers.local_wheels import env_file, planted_wheels

from titanflow.bisect.env_search import EnvBisectResult
from titanflow.bisect.packages import PackageChange
from titanflow.bisect.record import read_bisects
from titanflow.bisect.verdict import Check
from titanflow.paths import REPO_ROOT
from titanflow.record.summary import read_summary

TITANFLOW = Path(sys.executable).parent / "titanflow"
#: Two steps: the loss at step 2 is the first after an update (step 1's at lr x 0.5 of the warm-up), and a 2-step
#: run shares both losses with the 10-step golden (titan_cfg.lr_schedule: the same warm-up factors).
PROBE_STEPS = 2


def test_the_planted_dependency_is_found_between_two_environments(tmp_path, prefect_api):
    repo = copy_tracked(REPO_ROOT, tmp_path / "repo")
    git(repo, "init", "-q")
    revision = commit(repo, "titanflow as it is")
    wheels = planted_wheels(tmp_path / "wheels")
    good = env_file(tmp_path / "good.txt", wheels, {"planted-numerics": "1.0", "zeta-tools": "1.0"})
    bad = env_file(tmp_path / "bad.txt", wheels, {"planted-numerics": "1.1", "zeta-tools": "2.0"})
    start = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "bisect", "native", "--good-env", str(good), "--bad-env", str(bad),
                           "--steps", str(PROBE_STEPS), "--repo", str(repo), "--runs-dir", str(tmp_path / "bisects")],
                          check=False, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PREFECT_API_URL": prefect_api})
    print(f"\n{proc.stdout}\ntitanflow bisect: {time.monotonic() - start:.0f} s wall")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (folder,) = (tmp_path / "bisects").glob("bisect-native-cpu-random-*")
    result = EnvBisectResult.model_validate_json((folder / "bisect.json").read_text())

    # the package and its two versions; zeta-tools applied first (planted-numerics 1.1 requires it)
    assert result.status == "found" and result.revision == revision
    assert result.first_bad == PackageChange(name="planted-numerics", before="1.0", after="1.1")
    assert [c.name for c in result.changes] == ["zeta-tools", "planted-numerics"]
    assert result.check == Check(failure_class="numerics", check="golden_curve losses")
    assert [(p.role, p.revision, p.verdict) for p in result.probes] == [
        ("bad", "env-2", "bad"), ("good", "env-0", "good"), ("step", "env-1", "good")]
    assert "planted-numerics 1.0 -> 1.1 fails golden_curve losses (numerics)" in proc.stdout

    # each probe ran in its environment: its run recorded the overlay's versions (the stack of summary.json)
    expected = {"env-0": ("1.0", "1.0"), "env-1": ("1.0", "2.0"), "env-2": ("1.1", "2.0")}
    for p in result.probes:
        stack = read_summary(Path(p.run_dir) / "summary.json").stack["distributions"]
        assert (stack["planted-numerics"], stack["zeta-tools"]) == expected[p.revision], p
        assert len(p.losses) == PROBE_STEPS
    good_curve = result.probes[1].losses
    assert result.probes[2].losses == good_curve  # zeta-tools changes nothing
    bad_curve = result.probes[0].losses
    # step 1: the loss before any update, equal; step 2 after an update at 300 times the lr, beyond the rule's 0.2 band
    assert bad_curve[0] == good_curve[0] and abs(bad_curve[1] - good_curve[1]) > 0.2, (bad_curve, good_curve)

    # one overlay per content key: three environments, three overlays in the cache
    overlays = {Path(p.environment.rsplit(" ", 1)[-1]).name for p in result.probes}
    assert len(overlays) == 3 and all(name.startswith("overlay-") for name in overlays)

    # the Prefect artifact names the package and its two versions
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with SyncPrefectClient(prefect_api) as client:
        artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[result.flow_run_id])))
        assert client.read_flow_run(result.flow_run_id).state.name == "Completed"
    (artifact,) = [a for a in artifacts if a.key == "bisect-env-native-cpu-random"]
    assert "The package: **planted-numerics** 1.0 -> 1.1" in artifact.data

    # the history keeps it, with the package
    (row,) = read_bisects().query(f"bisect_id == '{result.bisect_id}'").itertuples()
    assert (row.kind, row.status, row.package, row.package_before, row.package_after) == (
        "environments", "found", "planted-numerics", "1.0", "1.1")
    print(f"probes (s): {[round(p.wall_s) for p in result.probes]}; bad {bad_curve}, good {good_curve}")
