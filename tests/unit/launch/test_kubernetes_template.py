"""The trn2-eks work pool template (titanflow.launch.kubernetes.template): pinned by deployments/kubernetes/trn2-eks.json,
accepted by Prefect's own work-pool validation, and, with its placeholders filled as Prefect fills them, a batch/v1
Job the official Kubernetes client's models read field for field, whose pods run titanflow.launch.kubernetes.pod.
(tests/e2e/test_kubernetes_pods.py runs the manifest Prefect's Kubernetes worker makes of it, as processes here.)

Write the file again after an intended change with
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/launch/test_kubernetes_template.py
(``make goldens`` does), or ``python -m titanflow.launch.kubernetes.template``.
"""

import json
import os
import uuid

import pytest
from prefect.server.schemas.actions import WorkPoolCreate
from prefect.utilities.templating import apply_values

from titan_cfg.targets import EFA_ENV
from titan_cfg.targets import TARGETS, work_pools
from titanflow.launch.kubernetes.template import (
    EFA_RESOURCE,
    NEURON_RESOURCE,
    job_template,
    kubernetes_pools,
    pool_template,
    template_path,
    write_template,
)
from titanflow.paths import REPO_ROOT


def trn2_eks_job_template() -> dict:
    """The trn2-eks pool's template, the one these tests hold to Prefect's and Kubernetes' own checks."""
    return pool_template("trn2-eks")


def _filled(template: dict, **given) -> dict:
    """The job configuration with every placeholder replaced, as a Prefect worker does: the variables' defaults,
    then ``given`` (what Prefect sets for a flow run: name; what a deployment sets: image)."""
    values = {name: spec.get("default") for name, spec in template["variables"]["properties"].items()} | given
    return apply_values(template["job_configuration"], values)


def _worker_manifest(**given) -> dict:
    """The batch/v1 Job Prefect's Kubernetes worker (prefect-kubernetes) submits for a flow run named
    ``flow-run-1`` from the template filled with ``given``: its job configuration (which checks the manifest) and
    its preparation for the flow run (the flow-run command, Prefect's environment, the name)."""
    from prefect.client.schemas.objects import FlowRun
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    config = KubernetesWorkerJobConfiguration(**_filled(trn2_eks_job_template(), name="flow-run-1", **given))
    config.prepare_for_flow_run(FlowRun(flow_id=uuid.uuid4(), name="flow-run-1"))
    return config.job_manifest


@pytest.mark.parametrize("pool", kubernetes_pools())
def test_the_template_file_is_the_one_titanflow_writes(pool):
    if os.environ.get("TITANFLOW_UPDATE_GOLDEN"):
        write_template(pool)
    assert json.loads(template_path(pool).read_text()) == pool_template(pool)


def test_the_template_files_are_exactly_the_kubernetes_pools_and_each_is_built_for_the_target_it_serves():
    """deployments/kubernetes/ holds one file per Kubernetes work pool of the targets' records (trn2-cluster's
    trn2-eks), written from that target: its rank environment and its nodes."""
    assert sorted(p.relative_to(REPO_ROOT) for p in (REPO_ROOT / "deployments" / "kubernetes").glob("*.json")) == sorted(
        template_path(pool).relative_to(REPO_ROOT) for pool in kubernetes_pools())
    assert kubernetes_pools() == ["trn2-eks"] and work_pools()["trn2-eks"][0] == "trn2-cluster"
    assert trn2_eks_job_template() == job_template(TARGETS["trn2-cluster"]())
    assert trn2_eks_job_template()["variables"]["properties"]["nnodes"]["default"] == TARGETS["trn2-cluster"]().nnodes
    with pytest.raises(ValueError, match="trn2 is no Kubernetes work pool of a target .*: trn2-eks"):
        pool_template("trn2")


def test_a_prefect_server_creates_the_work_pool_from_it(prefect_server):
    """The server's own checks (every placeholder a declared variable; every default of the variables' type) accept
    the template: a pool of type kubernetes, read back as written. A placeholder with no variable is refused."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="trn2-eks", type="kubernetes",
                                               base_job_template=trn2_eks_job_template()))
        pool = client.read_work_pool("trn2-eks")
    assert (pool.type, pool.base_job_template) == ("kubernetes", trn2_eks_job_template())
    assert pool.base_job_template["variables"]["required"] == ["image"]
    assert "default" not in pool.base_job_template["variables"]["properties"]["image"]  # no image is a default one
    broken = trn2_eks_job_template()
    del broken["variables"]["properties"]["nnodes"]
    with pytest.raises(ValueError, match="undeclared variable.*nnodes"):
        WorkPoolCreate(name="trn2-eks", type="kubernetes", base_job_template=broken)


def test_filled_in_it_is_a_kubernetes_job_of_one_pod_per_trn2_node_with_its_neuron_devices_and_efa():
    """Read by kubernetes.client's V1Job model and written back, the manifest is unchanged: no field it does not
    know (a misspelt one would be dropped), every type as the API wants it."""
    from kubernetes.client import ApiClient

    manifest = _worker_manifest(image="registry.example/titanflow-trn2:2.33", nnodes=4)
    assert "{{" not in json.dumps(manifest)
    client = ApiClient()
    job = client._ApiClient__deserialize(manifest, "V1Job")  # the client's own reader of API responses
    pod_spec = {k: v for k, v in manifest["spec"]["template"]["spec"].items() if k not in ("parallelism", "completions")}
    known = {**manifest, "spec": {**manifest["spec"], "template": {**manifest["spec"]["template"], "spec": pod_spec}}}
    assert client.sanitize_for_serialization(job) == known  # but the two fields Prefect's worker wants in the pod spec
    assert (job.spec.completion_mode, job.spec.completions, job.spec.parallelism) == ("Indexed", 4, 4)
    pod = job.spec.template.spec
    (term,) = pod.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert term.topology_key == "kubernetes.io/hostname"  # never two pods of the job on one node:
    assert term.match_label_keys == ["batch.kubernetes.io/controller-uid"]  # those with this pod's Job uid
    from titanflow.launch.kubernetes.launch import CANCEL_WAIT_S
    from titanflow.launch.process import KILL_GRACE_S

    assert pod.termination_grace_period_seconds > CANCEL_WAIT_S + KILL_GRACE_S  # a launch's cancel ends in it
    assert pod.node_selector == {"node.kubernetes.io/instance-type": "trn2.48xlarge"}
    (container,) = pod.containers
    assert container.resources.limits[NEURON_RESOURCE] == container.resources.requests[NEURON_RESOURCE] == "16"
    assert container.resources.limits[EFA_RESOURCE] == "16"
    env = {e.name: e.value for e in container.env if e.value_from is None}
    assert env.items() >= {**EFA_ENV, "NEURON_LOGICAL_NC_CONFIG": "2", "TITANFLOW_ROOT": "/fsx/titanflow"}.items()
    assert env["TITANFLOW_POD_COUNT"] == "4 "  # text, as Kubernetes wants an environment value (the run checks it)
    given = {e.name: e.value_from.field_ref.field_path for e in container.env if e.value_from is not None}
    assert given == {  # the downward API (titanflow.launch.kubernetes.pods): the job's uid, the pod's IP and name
        "TITANFLOW_POD_GROUP": "metadata.labels['batch.kubernetes.io/controller-uid']",
        "TITANFLOW_POD_IP": "status.podIP", "TITANFLOW_NODE": "metadata.name"}
    # pod 0 runs the flow-run command, the others the agent: titanflow.launch.kubernetes.pod decides by the pod's index
    assert container.command + container.args == ["python", "-m", "titanflow.launch.kubernetes.pod", "--", "prefect",
                                                  "flow-run", "execute"]
    assert env["PREFECT__FLOW_RUN_ID"]  # the worker's environment is every pod's
    assert job.metadata.generate_name == "flow-run-1-" and job.metadata.name is None  # unique per submission
