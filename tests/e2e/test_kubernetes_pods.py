"""The Kubernetes path without a cluster: the trn2-eks work pool's job, as Prefect's Kubernetes worker makes it
(prefect-kubernetes' job configuration from the template and a flow run), read by the Kubernetes client's V1Job
model; then its pods run here as processes, each with the manifest's own command and environment (the downward
API's values given by hand: the job's uid, the pod's IP 127.0.0.1, the pod's name) and its index.

- Pod 0 runs the flow run (``prefect flow-run execute``), pod 1 the agent; the native cpu scenario on 2 pods x 1
  rank trains the golden curve of 1 node x 2 ranks (goldens/loss_curves/native-cpu-random.curve.csv) step for
  step, exports and validates as on one node; both pods end, with the flow's exit code.
- A launch past its timeout is cancelled on every pod (no training: a sleeping command), class infrastructure,
  nothing left running.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
from helpers.golden_curve import assert_golden_curve_of_one_node
from helpers.run_processes import wait_until

from titan_cfg.targets import TARGETS
from titanflow import paths
from titanflow.launch.kubernetes.template import pool_template

#: 4 steps of the golden workload, all shared with the 10-step golden, which the flow judges them against (the
#: reasons: tests/e2e/test_slurm_runs.py's STEPS).
STEPS = 4


def _worker_manifest(api_url: str, parameters: dict) -> tuple[str, dict]:
    """A flow run of the qwen3-scenario flow (a deployment of it on the server at ``api_url``) and the batch/v1 Job
    Prefect's Kubernetes worker would submit for it from the trn2-eks template: (flow run id, manifest)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    from titanflow.flows.scenario import qwen3_scenario

    async def make():
        async with get_client() as client:
            deployment = await qwen3_scenario.ato_deployment(name="pods-here")
            deployment_id = await deployment.aapply()
            flow_run = await client.create_flow_run_from_deployment(deployment_id, parameters=parameters)
            config = await KubernetesWorkerJobConfiguration.from_template_and_values(
                pool_template("trn2-eks"), {"image": "titanflow:test", "nnodes": 2, "checkout": str(paths.REPO_ROOT)},
                client=client)
            config.prepare_for_flow_run(flow_run)
            return str(flow_run.id), config.job_manifest

    with temporary_settings({PREFECT_API_URL: api_url}):
        return asyncio.run(make())


def _pod_processes(manifest: dict, log_dir: Path) -> list[subprocess.Popen]:
    """The job's pods as processes here: the container's args and working folder, its environment with the
    downward API's values given (the job's uid, 127.0.0.1, ``<job>-<index>``) and the trn2 rank environment left
    out (this is a cpu run: the ranks take the cpu target's from launch.sh), ``JOB_COMPLETION_INDEX`` as Kubernetes
    sets it in an Indexed Job."""
    from kubernetes.client import ApiClient

    job = ApiClient()._ApiClient__deserialize(manifest, "V1Job")  # the client's own reader: a valid Job
    assert (job.spec.completion_mode, job.spec.completions) == ("Indexed", 2)
    (container,) = job.spec.template.spec.containers
    uid, trn2_env = str(uuid.uuid4()), set(TARGETS["trn2-cluster"]().env)
    bin_dir = str(Path(sys.executable).parent)
    procs = []
    for index in range(job.spec.completions):
        given = {"metadata.labels['batch.kubernetes.io/controller-uid']": uid, "status.podIP": "127.0.0.1",
                 "metadata.name": f"{job.metadata.generate_name}{index}"}
        env = {e.name: (e.value if e.value_from is None else given[e.value_from.field_ref.field_path])
               for e in container.env if e.name not in trn2_env}
        env = {**_here_env(), **env, "JOB_COMPLETION_INDEX": str(index), "PATH": f"{bin_dir}:/usr/bin:/bin"}
        log = open(log_dir / f"pod-{index}.log", "w")
        procs.append(subprocess.Popen(container.command + container.args, cwd=container.working_dir, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
    return procs


def _here_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith(("PREFECT_HOME", "TITANFLOW_", "HF_", "HOME", "TMP",
                                                                 "DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS"))}


def test_two_pods_of_the_worker_manifest_train_the_golden_curve_of_one_node(prefect_api, tmp_path, monkeypatch):
    from titanflow.record.summary import read_summary

    monkeypatch.setenv("TITANFLOW_PODS_DIR", str(tmp_path / "pods"))
    flow_run_id, manifest = _worker_manifest(prefect_api, {
        "scenario": "native", "target": "cpu", "nnodes": 2, "nproc_per_node": 1, "scheduler": "kubernetes",
        "steps": STEPS, "runs_dir": str(tmp_path / "runs"), "run_id": "two-pods"})
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == ["python", "-m", "titanflow.launch.kubernetes.pod", "--", "prefect",
                                                        "flow-run", "execute"]
    assert {"name": "PREFECT__FLOW_RUN_ID", "value": flow_run_id} in container["env"]
    started = time.monotonic()
    pods = _pod_processes(manifest, tmp_path)
    codes = [pod.wait(timeout=900) for pod in pods]
    wall_s = time.monotonic() - started
    logs = [(tmp_path / f"pod-{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert "titanflow pod: launch 1: rendezvous on 127.0.0.1:" in logs[1]
    assert "titanflow pod: the flow ended with exit code 0" in logs[1]
    run_dir = tmp_path / "runs" / "two-pods"
    summary = read_summary(run_dir / "summary.json")
    assert summary.verdict == "pass", summary.reason
    assert_golden_curve_of_one_node(summary, "two pods x 1 rank", wall_s, STEPS)
    assert summary.validation.parity.top1_agreement == 1.0
    nodes = run_dir / "train" / "nodes"
    names = sorted(p.name.removesuffix(".exit.json") for p in nodes.glob("*.exit.json"))
    assert len(names) == 2 and all(name.startswith(manifest["metadata"]["generateName"]) for name in names)
    for name in names:
        assert re.search(r"\[default[01]\]:.*step:\s*1\s", (nodes / f"{name}.log").read_text())
        assert json.loads((nodes / f"{name}.exit.json").read_text())["exit_code"] == 0
    train_log = (run_dir / "train.log").read_text()
    assert "launch 1 on its 2 pod(s), rendezvous on 127.0.0.1:" in train_log


def test_a_launch_past_its_timeout_is_cancelled_on_every_pod(tmp_path, tiny_assets, monkeypatch):
    """pod 0's launcher (titanflow.launch.kubernetes.launch.run_pods) and an agent pod (titanflow.launch.kubernetes.pod), each
    node a sleeping command under titanflow.launch.node: past the 8 s timeout the launch is cancelled, both pods
    record their node's end (SIGTERM: 143), and no sleep is left."""
    from titanflow.launch.kubernetes.launch import run_pods
    from titanflow.launch.render import render
    from titanflow.params import ScenarioRun

    group = str(uuid.uuid4())
    for name, value in {"TITANFLOW_PODS_DIR": str(tmp_path / "pods"), "TITANFLOW_POD_GROUP": group,
                        "TITANFLOW_POD_IP": "127.0.0.1", "TITANFLOW_NODE": "pod-0", "JOB_COMPLETION_INDEX": "0"}.items():
        monkeypatch.setenv(name, value)
    rendered = render(ScenarioRun(steps=3, nnodes=2, nproc_per_node=1, scheduler="kubernetes"),
                      tiny_assets.weights_dir, tmp_path / "run")
    script = Path(rendered.job_path).with_name("launch.sh")
    *head, node = script.read_text().splitlines()
    script.write_text("\n".join([*head, node[:node.index(" -- ") + 4] + "sleep 600"]) + "\n")
    agent = subprocess.Popen([sys.executable, "-m", "titanflow.launch.kubernetes.pod", "--", "true"], cwd=paths.REPO_ROOT,
                             env={**_here_env(), "TITANFLOW_NODE": "pod-1", "JOB_COMPLETION_INDEX": "1",
                                  "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    try:
        result = run_pods(rendered, timeout_s=8, log_path=tmp_path / "run" / "train.log")
        assert result.timed_out and result.returncode != 0
        nodes = tmp_path / "run" / "train" / "nodes"
        exits = {p.name: json.loads(p.read_text())["exit_code"] for p in nodes.glob("*.exit.json")}
        assert exits == {"pod-0.exit.json": 143, "pod-1.exit.json": 143}  # titanflow.launch.node: 128 + SIGTERM
        log = (tmp_path / "run" / "train.log").read_text()
        assert "killed after the 8 s timeout: launch 1 cancelled on every pod" in log
        wait_until(lambda: not [p for p in psutil.process_iter(["cmdline"])
                                if (p.info["cmdline"] or [])[:2] == ["sleep", "600"]], 10, "no sleep left")
    finally:
        from titanflow.launch.kubernetes import pods

        pods.finish(group, 1)
        assert agent.wait(timeout=30) == 1  # the flow "failed": the agent ends with 1
