"""The Slurm batch script of a job (``job/launch.sh`` of a Slurm job): one torchrun agent per node, the c10d
rendezvous on the first node of the allocation.

The script is complete as rendered: ``sbatch job/launch.sh`` runs the job by hand. When titanflow submits it
(titanflow.launch.slurm.job), it adds on sbatch's command line what belongs to one launch rather than to the job: the
time limit (from the run's timeout), the batch log's path and the site's partition and account
(:mod:`titanflow.launch.slurm.settings`); sbatch's options override the script's ``#SBATCH`` lines.

Each node runs :mod:`titanflow.launch.node` around the job's torchrun line (``srun``, one task per node); it gives
the line's placeholders (titanflow.launch.render.NODE_PLACEHOLDERS) their value on that node, writes the node's
console to ``train/nodes/<node>.log`` and its exit to ``train/nodes/<node>.exit.json``. ``--kill-on-bad-exit``:
the first node whose agent fails ends the job on every node.
"""

from __future__ import annotations

import shlex

from titan_cfg.job import Job
from titanflow import paths
from titanflow.launch.nodes import nodes_dir

#: Slurm job names start with this, then the run id.
JOB_NAME_PREFIX = "titanflow-"

#: The first node of the allocation and its address as Slurm knows it (NodeAddr: the name, unless the cluster
#: gives an address), and a free port there: the c10d rendezvous endpoint every node's agent joins; the job id as
#: the rendezvous id.
_ENDPOINT = """head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=$(scontrol show node "$head_node" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')
rdzv_port=$(python -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
export TITANFLOW_RDZV_ENDPOINT="${head_addr:-$head_node}:$rdzv_port"
export TITANFLOW_RDZV_ID="$SLURM_JOB_ID"  # every launch of every flow run is a job of its own
echo "titanflow: rendezvous on $TITANFLOW_RDZV_ENDPOINT (first node $head_node of $SLURM_JOB_NODELIST)"
"""


def job_name(run_id: str) -> str:
    """The Slurm job name of a run's launches: ``titanflow-<run id>``."""
    return JOB_NAME_PREFIX + run_id


def batch_script(job: Job, argv: list[str], exports: str) -> str:
    """The batch script of ``job``: ``#SBATCH`` lines (name, ``job.nnodes`` nodes, one task each, the nodes to
    itself, the repository as working folder), ``exports`` (the ranks' environment, as launch.sh of one node
    exports it), the rendezvous endpoint, and ``srun`` of :mod:`titanflow.launch.node` around ``argv`` (the
    torchrun line with its per-node placeholders, quoted so that each node expands them).

    ``python`` and ``torchrun`` are found on PATH as on one node: titanflow submits with its environment's
    ``bin`` first on PATH and Slurm exports it to the job (sbatch's default ``--export=ALL``).
    """
    nodes = nodes_dir(job)
    srun = ["srun", f"--nodes={job.nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "python", "-m", "titanflow.launch.node", str(nodes), "--"]
    return "".join([
        "#!/usr/bin/env bash\n",
        f"#SBATCH --job-name={job_name(job.run_id)}\n",
        f"#SBATCH --nodes={job.nnodes}\n",
        "#SBATCH --ntasks-per-node=1\n",
        "#SBATCH --exclusive\n",
        f"#SBATCH --chdir={paths.REPO_ROOT}\n",
        "# titanflow (titanflow.launch.slurm.batch): one torchrun agent per node, c10d rendezvous on the first node.\n",
        "# sbatch launch.sh runs it as it is; titanflow adds --time, --output and the partition when it submits.\n",
        "set -euo pipefail\n",
        exports,
        _ENDPOINT,
        f"mkdir -p {shlex.quote(str(nodes))}\n",
        f"{shlex.join(srun)} {shlex.join(argv)}\n",
    ])
