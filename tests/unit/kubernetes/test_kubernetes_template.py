"""The trn2-eks work pool template (titanflow.prefect_ops.kubernetes), on paper: pinned by
deployments/kubernetes/trn2-eks.json, accepted by Prefect's own work-pool validation, and, with its placeholders
filled as Prefect fills them, a batch/v1 Job the official Kubernetes client's models read field for field.

Write the file again after an intended change with
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/prefect_ops/test_kubernetes_template.py
"""

import json
import os

import pytest
from prefect.server.schemas.actions import WorkPoolCreate
from prefect.utilities.templating import apply_values

from titan_cfg.targets import EFA_ENV
from titanflow.prefect_ops.kubernetes import (EFA_RESOURCE, NEURON_RESOURCE, TEMPLATE_PATH, trn2_eks_job_template,
                                              write_template)


def _filled(template: dict, **given) -> dict:
    """The job configuration with every placeholder replaced, as a Prefect worker does: the variables' defaults,
    then ``given`` (what Prefect sets for a flow run: name, command; what a deployment sets: image)."""
    values = {name: spec.get("default") for name, spec in template["variables"]["properties"].items()} | given
    return apply_values(template["job_configuration"], values)


def test_the_template_file_is_the_one_titanflow_writes():
    if os.environ.get("TITANFLOW_UPDATE_GOLDEN"):
        write_template()
    assert json.loads(TEMPLATE_PATH.read_text()) == trn2_eks_job_template()


def test_prefect_accepts_it_as_a_kubernetes_work_pools_template():
    """Every placeholder of the job configuration is a declared variable (Prefect's own check of a work pool)."""
    pool = WorkPoolCreate(name="trn2-eks", type="kubernetes", base_job_template=trn2_eks_job_template())
    assert pool.base_job_template["variables"]["required"] == ["image"]
    broken = trn2_eks_job_template()
    del broken["variables"]["properties"]["nnodes"]
    with pytest.raises(ValueError, match="undeclared variable.*nnodes"):
        WorkPoolCreate(name="trn2-eks", type="kubernetes", base_job_template=broken)


def test_filled_in_it_is_a_kubernetes_job_of_one_pod_per_trn2_node_with_its_neuron_devices_and_efa():
    """Read by kubernetes.client's V1Job model and written back, the manifest is unchanged: no field it does not
    know (a misspelt one would be dropped), every type as the API wants it."""
    from kubernetes.client import ApiClient

    config = _filled(trn2_eks_job_template(), name="flow-run-1", command="prefect flow-run execute",
                     image="registry.example/titanflow-trn2:2.33", nnodes=4)
    assert "{{" not in json.dumps(config)
    manifest = config["job_manifest"]
    client = ApiClient()
    job = client._ApiClient__deserialize(manifest, "V1Job")  # the client's own reader of API responses
    assert client.sanitize_for_serialization(job) == manifest
    assert (job.spec.completion_mode, job.spec.completions, job.spec.parallelism) == ("Indexed", 4, 4)
    pod = job.spec.template.spec
    (term,) = pod.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert term.topology_key == "kubernetes.io/hostname"  # never two pods of the job on one node
    assert pod.node_selector == {"node.kubernetes.io/instance-type": "trn2.48xlarge"}
    (container,) = pod.containers
    assert container.resources.limits[NEURON_RESOURCE] == container.resources.requests[NEURON_RESOURCE] == "16"
    assert container.resources.limits[EFA_RESOURCE] == "16"
    env = {e.name: e.value for e in container.env}
    assert env.items() >= {**EFA_ENV, "NEURON_LOGICAL_NC_CONFIG": "2"}.items()
    assert env["TITANFLOW_RDZV_ENDPOINT"] == "flow-run-1-0.titanflow-trn2:29400"  # pod 0 of the Indexed Job
    assert container.args == ["/bin/bash", "-c", "prefect flow-run execute"]
