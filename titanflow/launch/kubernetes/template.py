"""trn2 nodes on Amazon EKS: the base job template of a Prefect work pool of type ``kubernetes``, built for the target
the pool serves (:func:`job_template`; the pool's record in its target's ``work_pools``, titan_cfg.targets.WorkPool,
names the file: trn2-cluster's ``trn2-eks``, ``deployments/kubernetes/trn2-eks.json``), not run anywhere yet.

    prefect work-pool create trn2-eks --type kubernetes --base-job-template deployments/kubernetes/trn2-eks.json

What the template holds (docs/many-nodes.md, "Kubernetes"): a Kubernetes Indexed Job of ``nnodes`` pods, one per
trn2.48xlarge (a required pod anti-affinity on the host name, the instance type as node selector, the Neuron
taint tolerated), each pod with the node's 16 Neuron devices (``aws.amazon.com/neuron``, the Neuron device
plugin's resource) and its EFA interfaces (``vpc.amazonaws.com/efa``, the EFA device plugin's), the target's rank
environment with its EFA settings (titan_cfg.targets), ``/dev/shm`` in memory and the shared file
system that holds the checkout and the run folders. Resource names: "Manage Neuron devices on Amazon EKS"
(https://docs.aws.amazon.com/eks/latest/userguide/device-management-neuron.html) and the Neuron EKS guide
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/deploy/eks/index.html).

Every pod runs titanflow.launch.kubernetes.pod around Prefect's flow-run command: pod 0 (``JOB_COMPLETION_INDEX``, which
Kubernetes sets in an Indexed Job) runs the flow, the others join each training launch of its train task as
torchrun agents (titanflow.launch.kubernetes.launch, run with ``--scheduler kubernetes``). The Kubernetes downward API
gives each pod the job's uid (``batch.kubernetes.io/controller-uid``, the key of the launch records shared by the
pods), its IP (pod 0's is the rendezvous endpoint) and its name (the node's name in the run's logs). Validated
with the Prefect Kubernetes worker's own job configuration (prefect-kubernetes: the manifest a worker would
submit) and the official Kubernetes client's models (tests/unit/launch/test_kubernetes_template.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from titan_cfg.targets import TARGETS, Target, work_pools
from titanflow.launch.kubernetes import pods
from titanflow.launch.node import NODE_ENV
from titanflow.paths import REPO_ROOT

#: The Neuron device plugin's resource: whole Neuron devices (Trainium2 chips).
NEURON_RESOURCE = "aws.amazon.com/neuron"
#: The EFA device plugin's resource: EFA network interfaces.
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: Neuron devices of one trn2.48xlarge: 16 Trainium2 chips (x 8 physical cores / LNC 2 = the target's 64 ranks).
NEURON_DEVICES_PER_NODE = 16
#: EFA interfaces of one trn2.48xlarge (its 3.2 Tbps EFAv3 as 16 interfaces); `kubectl describe node` shows the
#: count the EFA device plugin advertises: set the work pool variable ``efa_interfaces`` to it.
EFA_PER_NODE = 16


#: Seconds Kubernetes gives a pod between SIGTERM and SIGKILL: more than a launch's cancel takes (its agents end
#: their nodes, titanflow.launch.kubernetes.launch.CANCEL_WAIT_S, after torchrun's own grace), so the exit records and
#: the end of the flow are written before the pod is killed.
TERMINATION_GRACE_S = 120
#: The label Kubernetes gives every pod of a Job, with the Job's uid as its value.
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


def _variable(kind: str, default, description: str) -> dict:
    """A job variable of the template's schema; ``default`` None: none (Prefect checks a default against the
    variable's type when the pool is created, and None is no string)."""
    spec = {"type": kind, "description": description}
    return spec if default is None else {**spec, "default": default}


def job_template(target: Target) -> dict:
    """The base job template of a Kubernetes work pool whose runs train on ``target`` (trn2.48xlarge nodes):
    ``job_configuration`` (Prefect's ``command``, ``env``, ``labels``, ``name``, ``namespace`` and the
    ``job_manifest``, a batch/v1 Job with ``{{ variable }}`` placeholders) and ``variables`` (the JSON schema of what
    a deployment may set, each with its default: ``nnodes`` the target's). Every pod has the target's rank
    environment."""
    rank_env = [{"name": name, "value": value} for name, value in sorted(target.env.items())]

    def field(path: str) -> dict:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    pod_env = [
        {"name": "TITANFLOW_ROOT", "value": "{{ checkout }}"},  # where the deployments' pull step starts a flow run
        # the downward API: what titanflow.launch.kubernetes.pods reads in each pod
        {"name": pods.GROUP_ENV, **field(f"metadata.labels['{JOB_UID_LABEL}']")},
        # the run's nnodes must be this (preflight). The space: a placeholder alone would be written as the integer,
        # and an environment value must be a string; Prefect writes a placeholder within text as text
        {"name": pods.POD_COUNT_ENV, "value": "{{ nnodes }} "},
        {"name": pods.POD_IP_ENV, **field("status.podIP")},
        {"name": NODE_ENV, **field("metadata.name")},
    ]
    devices = {NEURON_RESOURCE: "{{ neuron_devices }}", EFA_RESOURCE: "{{ efa_interfaces }}",
               "hugepages-2Mi": "{{ hugepages }}", "memory": "{{ memory }}"}
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # a name of its own per submission (the worker's default): two flow runs of one name never clash
        "metadata": {"generateName": "{{ name }}-", "namespace": "{{ namespace }}", "labels": "{{ labels }}"},
        "spec": {
            "completionMode": "Indexed",  # pod i has JOB_COMPLETION_INDEX=i: pod 0 runs the flow
            "completions": "{{ nnodes }}",
            "parallelism": "{{ nnodes }}",  # every node at once: the rendezvous needs them all
            "backoffLimit": 0,  # a failed pod fails the job; the train task's retries relaunch on the same pods
            "ttlSecondsAfterFinished": "{{ finished_job_ttl }}",
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    # Prefect's Kubernetes worker refuses a template without these two here (its job configuration
                    # checks the manifest against its own base one, which has them in the pod spec); Kubernetes
                    # ignores them there: the job's own completions and parallelism above are what count
                    "parallelism": 1,
                    "completions": 1,
                    "nodeSelector": {"node.kubernetes.io/instance-type": "trn2.48xlarge"},
                    "tolerations": [{"key": NEURON_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    # one pod of the job per node: pods that carry the Job uid label with this pod's value
                    # (matchLabelKeys, Kubernetes 1.31+; each pod also takes all of its node's Neuron devices)
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchExpressions": [{"key": JOB_UID_LABEL, "operator": "Exists"}]},
                        "matchLabelKeys": [JOB_UID_LABEL],
                        "topologyKey": "kubernetes.io/hostname"}]}},
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_S,  # one pod per node
                    "containers": [{
                        "name": "prefect-job",
                        "image": "{{ image }}",
                        "imagePullPolicy": "IfNotPresent",
                        "workingDir": "{{ checkout }}",
                        # the pod's role by its index (titanflow.launch.kubernetes.pod): pod 0 runs the flow-run command,
                        # which Prefect's worker makes the arguments (it fills only a string or absent ``args``),
                        # the others the agent
                        "command": ["python", "-m", "titanflow.launch.kubernetes.pod", "--"],
                        "args": "{{ command }}",
                        "env": rank_env + pod_env,
                        "resources": {"requests": devices, "limits": devices},
                        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"},
                                         {"name": "shared", "mountPath": "{{ shared_mount }}"}],
                    }],
                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}},
                                {"name": "shared", "persistentVolumeClaim": {"claimName": "{{ shared_claim }}"}}],
                },
            },
        },
    }
    variables = {
        "type": "object",
        "properties": {
            "name": _variable("string", None, "the job's name (Prefect sets the flow run's)"),
            "namespace": _variable("string", "default", "the Kubernetes namespace"),
            "labels": {"type": "object", "default": {}, "description": "labels of the job",
                       "additionalProperties": {"type": "string"}},
            "command": _variable("string", None, "the flow-run command (Prefect sets it)"),
            "env": {"type": "object", "default": {}, "description": "further environment of every pod",
                    "additionalProperties": {"type": "string"}},
            "image": _variable("string", None, f"an image with the {target.profile} install profile "
                               f"(profiles/{target.profile}) and titanflow"),
            "nnodes": _variable("integer", target.nnodes, "trn2.48xlarge nodes: one pod each"),
            # quantities are strings in the Kubernetes API (a number would be one too, but not in its models)
            "neuron_devices": _variable("string", str(NEURON_DEVICES_PER_NODE), f"{NEURON_RESOURCE} per pod: the "
                                        "node's"),
            "efa_interfaces": _variable("string", str(EFA_PER_NODE), f"{EFA_RESOURCE} per pod: the node's"),
            "hugepages": _variable("string", "5120Mi", "hugepages-2Mi per pod (EFA's libfabric registers memory "
                                   "in huge pages)"),
            "memory": _variable("string", "1800Gi", "memory per pod (a trn2.48xlarge has 2 TiB)"),
            "checkout": _variable("string", "/fsx/titanflow", "the titanflow checkout on the shared file system"),
            "shared_mount": _variable("string", "/fsx", "where the shared file system is mounted"),
            "shared_claim": _variable("string", "fsx-claim", "its PersistentVolumeClaim (FSx for Lustre)"),
            "finished_job_ttl": _variable("integer", 3600, "seconds a finished job's pods are kept for their logs"),
        },
        "required": ["image"],
    }
    configuration = {"command": "{{ command }}", "env": "{{ env }}", "labels": "{{ labels }}", "name": "{{ name }}",
                     "namespace": "{{ namespace }}", "job_manifest": manifest}
    return {"job_configuration": configuration, "variables": variables}


def kubernetes_pools() -> list[str]:
    """The work pools of type ``kubernetes`` (titan_cfg.targets.work_pools), each with a template file."""
    return [pool for pool, (_, record) in work_pools().items() if record.kind == "kubernetes"]


def pool_template(pool: str) -> dict:
    """The base job template of the Kubernetes work pool ``pool``: :func:`job_template` of the target that serves it.

    Raises:
        ValueError: ``pool`` is no Kubernetes work pool of a target (names those there are).
    """
    if pool not in kubernetes_pools():
        raise ValueError(f"{pool} is no Kubernetes work pool of a target (titan_cfg.targets): "
                         f"{', '.join(kubernetes_pools()) or 'none'}")
    return job_template(TARGETS[work_pools()[pool][0]]())


def template_path(pool: str) -> Path:
    """The template file of the Kubernetes work pool ``pool`` (its record's ``template``, under the repository root),
    which ``prefect work-pool create --base-job-template`` reads."""
    return REPO_ROOT / work_pools()[pool][1].template


def write_template(pool: str) -> Path:
    """Write :func:`pool_template` of ``pool`` as indented JSON to :func:`template_path`; returns the path."""
    path = template_path(pool)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(pool_template(pool), indent=2) + "\n")
    return path


if __name__ == "__main__":
    for kubernetes_pool in kubernetes_pools():
        print(write_template(kubernetes_pool))
