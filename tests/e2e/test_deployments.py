"""Deployments as users run them: ``make server``'s module (titanflow.prefect_ops.server) starts a real Prefect
server, pools, the deployments of deployments/prefect.yaml and a cpu worker; runs go through
``prefect deployment run ... --watch`` with real torchrun/torchtitan/transformers underneath.

The server (``deployed``) and the passing run (``passing_deployment_run``) are session fixtures of
tests/conftest.py, shared with tests/e2e/test_browser.py; with the failing run, two short trainings
(~1-1.5 min each on 2 cores). The measured figures (server start, worker pick-up, deployment run to
Completed) are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.deployment_runs import PASS_DEPLOYMENT, PASS_RUN_ID, PASS_STEPS, run_deployment, state_times
from helpers.terminal import TITANFLOW

from titanflow.launch.kubernetes.template import pool_template
from titanflow.params import ScenarioRun
from titanflow.paths import REPO_ROOT
from titanflow.prefect_ops import server
from titanflow.prefect_ops.deployments import WORK_POOLS
from titanflow.record.summary import read_summary


def _client(state):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(state.api_url)


def _flow_run_count(state) -> int:
    with _client(state) as client:
        return client.count_flow_runs()


def _logs(state, flow_run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with _client(state) as client:
        return [log.message for log in client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]


def test_server_has_the_pools_the_deployments_of_prefect_yaml_and_a_cpu_worker(deployed):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    config = yaml.safe_load(server.PREFECT_YAML.read_text())
    pools, names, skipped = server.deployment_plan()
    # this host, a trn2 node, a trn2 cluster's login node, trn2 nodes on EKS
    assert set(pools) == {"cpu", "trn2", "trn2-cluster", "trn2-eks"}
    # every deployment whose flow file exists is deployed
    assert skipped == [] and deployed.deployments == names
    with _client(deployed) as client:
        assert {p: client.read_work_pool(p).type for p in pools} == {
            "cpu": "process", "trn2": "process", "trn2-cluster": "process", "trn2-eks": "kubernetes"}
        assert client.read_work_pool("trn2-eks").base_job_template == pool_template("trn2-eks")
        assert len(client.read_workers_for_work_pool("cpu")) == 1
        found = {d.name: d for d in client.read_deployments(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)))}
    for spec in config["deployments"]:
        if spec["name"] in skipped:
            continue
        got = found[spec["name"]]
        assert (got.parameters, set(got.tags), got.work_pool_name) == (
            spec["parameters"], set(spec["tags"]), spec["work_pool"]["name"])
        if spec["entrypoint"].startswith("flows/scenario.py"):
            params = spec["parameters"]
            # <scenario>-<pool>-<init>: a pool is named after its target, but trn2-eks (trn2-cluster's nodes as pods)
            assert spec["name"] == f"{params['scenario']}-{spec['work_pool']['name']}-{params['init']}"
            assert WORK_POOLS[spec["work_pool"]["name"]][0] == params["target"]
            assert got.schedules == [] and got.enforce_parameter_schema
            # typed schema from the flow signature: steps is an integer (or null: ScenarioRun's default)
            steps = got.parameter_openapi_schema["properties"]["steps"]
            assert {t.get("type") for t in steps["anyOf"]} == {"integer", "null"}
        elif spec["entrypoint"].startswith("flows/bisection.py"):  # the bisect: on demand, its revisions required
            assert got.schedules == [] and got.enforce_parameter_schema
            assert set(got.parameter_openapi_schema["required"]) == {"good", "bad"}
        else:  # the nightly suite: a cron
            assert [s.schedule.cron for s in got.schedules] == [spec["schedules"][0]["cron"]]


def test_second_start_reuses_the_running_server(deployed):
    again = server.start(Path(deployed.home))
    assert [p.pid for p in again.processes] == [p.pid for p in deployed.processes]
    assert again.api_url == deployed.api_url


@pytest.mark.parametrize("param, field", [
    ("steps=abc", "steps"),       # not JSON: sent as the string "abc"
    ('steps="3"', "steps"),       # a JSON string: not coerced by the schema check, refused
    ("steps=3.5", "steps"),       # a float where an integer is declared
    ("stpes=3", "stpes"),         # a misspelt name is not dropped in favour of the default
    ("init=pretty", "init"),      # outside the flow signature's Literal["random", "pretrained"]
])
def test_bad_string_parameters_are_refused_before_a_flow_run_exists(deployed, param, field):
    before = _flow_run_count(deployed)
    run = run_deployment(deployed.api_url, PASS_DEPLOYMENT, param, watch=False, timeout_s=120)
    assert run.returncode == 1 and run.flow_run_id is None, run.output
    assert field in run.output
    assert _flow_run_count(deployed) == before


def test_deployment_run_watch_exits_0_after_a_pass_with_the_resolved_parameters_logged(
        deployed, passing_deployment_run):
    run = passing_deployment_run.run  # `--param steps=3 --param run_id=deploy-pass` (tests/helpers/deployment_runs.py)
    assert run.returncode == 0, run.output[-4000:]
    assert "Completed" in run.output
    summary = passing_deployment_run.summary()
    assert summary.verdict == "pass" and summary.flow_run_id == str(run.flow_run_id)
    # the string "3" on the command line, as int
    assert summary.steps == PASS_STEPS and len(summary.losses) == PASS_STEPS
    # the flow logs every resolved parameter: the given ones and ScenarioRun's defaults for the rest
    prefix = f"run {PASS_RUN_ID} with "
    (line,) = [m for m in _logs(deployed, run.flow_run_id) if m.startswith(prefix)]
    resolved = json.loads(line.removeprefix(prefix))
    assert resolved["steps"] == PASS_STEPS and resolved["init"] == "random"
    assert resolved["lr"] == ScenarioRun.model_fields["lr"].default
    times = state_times(deployed.api_url, run.flow_run_id)
    pickup = times["Pending"] - times["Scheduled"]
    print(f"\ndeployment run -> Completed: {run.wall_s:.1f} s (wall, `prefect deployment run --watch`); "
          f"worker pick-up {pickup:.1f} s; Running -> Completed {times['Completed'] - times['Running']:.1f} s")
    # a process worker polls every PREFECT_WORKER_QUERY_SECONDS (Prefect's default: 10 s)
    assert pickup <= float(os.environ.get("PREFECT_WORKER_QUERY_SECONDS", 10)) + 5


def test_deployment_run_watch_exits_1_on_a_fail_verdict(deployed, tmp_path, tiny_assets):
    # planted: "pretrained" init from the random tiny weights; compare_loss requires the first-step
    # loss to sit pretrained_gap (2 nats) below the random-init value, which random weights cannot
    run = run_deployment(deployed.api_url, "qwen3-scenario/native-cpu-pretrained", "steps=1", "run_id=deploy-fail",
                         f"runs_dir={tmp_path}", f"weights={tiny_assets.weights_dir}")
    assert run.returncode == 1, run.output[-4000:]
    assert "Failed" in run.output
    summary = read_summary(tmp_path / "deploy-fail" / "summary.json")
    assert summary.verdict == "fail" and summary.failed_task is None
    assert "were the weights loaded?" in summary.reason


def _pins(profile: str) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of ``profiles/<profile>/constraints.txt``."""
    lines = (REPO_ROOT / "profiles" / profile / "constraints.txt").read_text().splitlines()
    return dict(line.split("#")[0].strip().split("==") for line in lines if "==" in line.split("#")[0])


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """{path: (size, mtime_ns)} of every file under ``folder``: what a run would have appended or replaced."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def _tree_cpu_s(state) -> float:
    """User + system seconds of the server's and worker's processes and of the children they waited for."""
    import psutil

    times = [psutil.Process(p.pid).cpu_times() for p in state.processes]
    return sum(t.user + t.system + t.children_user + t.children_system for t in times)


def test_the_canary_runs_the_lowest_lane_beside_cpu_reports_the_packages_and_leaves_the_nightly_alone(
        deployed, tmp_path, monkeypatch):
    """qwen3-canary/canary-cpu from prefect.yaml: the lowest lane's venv (.venv-lowest, profile cpu-lowest) pinned,
    .venv (cpu) its successor, one scenario of 2 steps on 1 rank each; alerts on, sent to a receiver here."""
    from prefect.client.orchestration import SyncPrefectClient
    from helpers.webhook import webhook_receiver
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowFilter, FlowFilterName

    from titanflow.canary.compare import CanaryResult
    from titanflow.record.run_compare import compare, find_run
    from titanflow.paths import history_root
    from titanflow.prefect_ops import alerts

    for venv, command in ((".venv-lowest", "make setup-lowest"), (".venv", "make setup")):
        if not (REPO_ROOT / venv / "bin" / "python").exists():
            pytest.skip(f"no {venv} at the repository root: {command} (make test builds both)")
    api, home = deployed.api_url, Path(deployed.home)
    history_before = _files(history_root())
    # the canary's CPU: the session's server and worker, whose flow runs (and theirs) they wait for, so a test's own
    # figure (tests/helpers/cpu_budget.py) does not hold it
    cpu_before = _tree_cpu_s(deployed)
    with webhook_receiver() as (url, received):
        monkeypatch.setenv(alerts.WEBHOOK_ENV, url)
        try:
            assert server.start(home).alerts.startswith("on: webhook")
            with SyncPrefectClient(api) as client:
                nightlies_before = client.count_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
                    any_=[alerts.NIGHTLY_FLOW])))
            run = run_deployment(api, "qwen3-canary/canary-cpu", 'scenarios=["native"]', 'inits=["random"]',
                                 "steps=2", "nproc_per_node=1", f"runs_dir={tmp_path}", "canary_id=canary-e2e",
                                 timeout_s=900)
            assert run.returncode == 0 and "Completed" in run.output, run.output[-4000:]
            time.sleep(5)  # an alert comes within a few seconds of a state (tests/e2e/test_alert_runs.py prints it)
            assert received == []
            with SyncPrefectClient(api) as client:
                assert client.count_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
                    any_=[alerts.NIGHTLY_FLOW]))) == nightlies_before
                (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["canary-cpu-lowest"])), limit=1)
        finally:
            monkeypatch.delenv(alerts.WEBHOOK_ENV)
            server.start(home)  # alerts off again, as the session's other tests expect
    result = CanaryResult.model_validate_json((tmp_path / "canary-e2e" / "canary.json").read_text())
    # the packages that differ are the two profiles' pins that differ (profiles/cpu-lowest vs profiles/cpu)
    lowest, newest = _pins("cpu-lowest"), _pins("cpu")
    pinned_apart = {f"{name} {lowest[name]} -> {newest[name]}" for name in lowest if lowest[name] != newest[name]}
    assert {"prefect", "pandas"} <= {line.split()[0] for line in pinned_apart}
    assert pinned_apart <= set(result.packages), result.packages
    assert all(f"`{line}`" in artifact.data for line in pinned_apart)
    # torch, torchtitan and transformers are the same in both venvs, so the same code gives the same first step
    assert not {line.split()[0].lstrip("+-") for line in result.packages} & {"torch", "torchtitan", "transformers"}
    (row,) = result.rows
    assert (row.scenario, row.init, row.pinned.verdict, row.successor.verdict) == ("native", "random", "pass", "pass")
    assert row.pinned.first_loss == row.successor.first_loss and row.pinned.tokens_per_s > 0
    assert f"| native | random | pass -> pass | {row.pinned.first_loss:.4f} -> " in artifact.data
    # each side appended to its own history under the canary's folder; the nightly's history and baselines unchanged
    for role in ("pinned", "successor"):
        assert (tmp_path / "canary-e2e" / role / "history" / "runs.parquet").is_file()
    assert _files(history_root()) == history_before
    # titanflow compare of the lowest venv's run against the main venv's leads with the packages that differ
    pinned, successor = (tmp_path / "canary-e2e" / role / "runs" / f"native-cpu-random-{role}"
                         for role in ("pinned", "successor"))
    compared = subprocess.run([str(TITANFLOW), "compare", str(pinned), str(successor), "--png",
                               str(tmp_path / "canary-pair.png")], capture_output=True, text=True, timeout=300,
                              env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"})
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    # the runs' recorded stacks (summary.json) name the same changes as the canary's reading of the two venvs
    both = compare(find_run(str(pinned), pd.DataFrame()), find_run(str(successor), pd.DataFrame()))
    assert set(both.packages) == set(result.packages)
    first, second = compared.stdout.splitlines()[:2]
    assert f": {len(result.packages)} package(s) differ; curves within 0.02 nats" in first, first
    assert second == both.environment_line() and second.startswith(
        f"environment: {len(result.packages)} package(s) differ: {both.packages[0]}"), second
    print(f"\ncanary (2 sides x native/random, 2 steps, 1 rank): {run.wall_s:.1f} s wall, "
          f"{_tree_cpu_s(deployed) - cpu_before:.1f} CPU-s in the server and worker; "
          f"{len(result.packages)} package(s) differ\n{artifact.data}")
