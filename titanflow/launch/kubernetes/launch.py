"""A training launch over the pods of a titanflow Kubernetes job, as pod 0's train task runs it.

Pod 0 (the flow, titanflow.launch.kubernetes.pod) writes the launch's record (titanflow.launch.kubernetes.pods): the job's
``launch.sh`` (:func:`pod_script`), the c10d rendezvous endpoint (its own address and a free port) and the
rendezvous id ``<job uid>-<n>``. Then it runs ``launch.sh`` itself, as every agent pod does on reading the record:
one torchrun agent per pod, under titanflow.launch.node, each pod's console into ``train/nodes/<pod>.log`` and its
exit into ``train/nodes/<pod>.exit.json``. torchrun's rendezvous makes the world of ``nnodes`` pods; the ranks are
numbered by it, not by the pod index.

The train task follows it as it follows a Slurm job (titanflow.launch.nodes): every pod's console into the Prefect
log, the rank-0 pod's into train.log, each pod's exit, the root cause on the pod that failed first. The timeout,
an interrupt or a Prefect cancel marks the launch cancelled, so that every agent ends its node, and ends pod 0's;
the launch is over when every pod recorded its exit (or :data:`CANCEL_WAIT_S` passed).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from titan_cfg.job import Job
from titanflow import paths
from titanflow.launch.kubernetes import pods
from titanflow.launch.node import NODE_ENV, RDZV_ENDPOINT_ENV, RDZV_ID_ENV, exit_record, node_name
from titanflow.launch.node import log_path as node_log_path
from titanflow.launch.nodes import NodeLogs, NodeRouter, first_failed, nodes_dir, signals_held
from titanflow.launch.process import KILL_GRACE_S, ProcessResult

#: Seconds between two reads of the pods' consoles.
POLL_S = 0.5
#: Seconds the other pods get to record their exit once pod 0's node ended: they end with the rendezvous, or on
#: their next collective.
EXITS_WAIT_S = 60.0
#: Seconds every pod gets to end its node after a cancel (torchrun's SIGTERM to its ranks, then the kill).
CANCEL_WAIT_S = 60.0


def pod_script(job: Job, argv: list[str], exports: str) -> str:
    """``launch.sh`` of a job on Kubernetes: what each pod runs for one launch: ``exports`` (the ranks'
    environment), then titanflow.launch.node around ``argv`` (the torchrun line with its per-node placeholders,
    quoted so that each pod expands them). The rendezvous endpoint and id come from the launch's record
    (:func:`node_env`); without them the script stops before torchrun starts."""
    nodes = nodes_dir(job)
    node = ["python", "-m", "titanflow.launch.node", str(nodes), "--"]
    return "".join([
        "#!/usr/bin/env bash\n",
        "# titanflow (titanflow.launch.kubernetes.launch): one pod's torchrun agent of a launch over the Kubernetes job's\n",
        f"# {job.nnodes} pod(s); pod 0's train task sets the rendezvous, each pod runs this with it.\n",
        "set -euo pipefail\n",
        f": \"${{{RDZV_ENDPOINT_ENV}:?the launch record of pod 0 sets it}}\" \"${{{RDZV_ID_ENV}:?the launch record of "
        "pod 0 sets it}\"\n",
        f"cd {shlex.quote(str(paths.REPO_ROOT))}\n",
        exports,
        f"mkdir -p {shlex.quote(str(nodes))}\n",
        f"exec {shlex.join(node)} {shlex.join(argv)}\n",
    ])


def node_env(record: dict) -> dict[str, str]:
    """The environment a pod runs a launch's ``launch.sh`` with: this one, this Python's ``bin`` first on PATH
    (``python`` and ``torchrun`` are this environment's), the record's rendezvous and the pod's name."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            RDZV_ENDPOINT_ENV: record["endpoint"], RDZV_ID_ENV: record["rdzv_id"], NODE_ENV: node_name()}


def start_node(record: dict) -> subprocess.Popen:
    """Start ``bash launch.sh`` of a launch record in a session of its own, its own output (what the script says
    before torchrun starts) appended to the pod's console."""
    nodes = Path(record["nodes"])
    nodes.mkdir(parents=True, exist_ok=True)
    with open(node_log_path(nodes, node_name()), "ab") as console:
        return subprocess.Popen(["bash", record["script"]], env=node_env(record), stdout=console,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=paths.REPO_ROOT)


def end_node(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the node's session (torchrun ends its ranks; titanflow.launch.node records the exit), SIGKILL what
    is left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def rendezvous_endpoint() -> str:
    """``<this pod's IP>:<a free port>``: the pod's IP from :data:`titanflow.launch.kubernetes.pods.POD_IP_ENV`, else the
    address its host name resolves to."""
    host = os.environ.get(pods.POD_IP_ENV) or socket.gethostbyname(socket.gethostname())
    return f"{host}:{_free_port()}"


def _recorded(nodes: Path, names: list[str]) -> int:
    return sum(exit_record(nodes, name).is_file() for name in names)


def run_pods(rendered, *, timeout_s: float, log_path: Path,
             on_lines: Callable[[list[str]], None] = lambda _: None) -> ProcessResult:
    """Launch the rendered job on every pod of this Kubernetes job (module docstring), follow it to its end and
    return how it ended, as titanflow.launch.process.run_streaming does for one node: ``returncode`` 0 when every
    one of the job's ``nnodes`` pods recorded exit 0 (else the exit code of the pod that failed first, else 1),
    ``timed_out`` when the timeout cancelled it, ``peak_rss_bytes`` the largest of the pods' records. Interrupted, it
    cancels the launch on every pod, waits for them, then re-raises.

    Raises:
        titanflow.launch.kubernetes.pods.PodError: this is not pod 0 of a titanflow Kubernetes job.
    """
    job = Job.read(Path(rendered.job_path))
    name = pods.group()
    nodes = nodes_dir(job)
    nodes.mkdir(parents=True, exist_ok=True)
    for stale in nodes.glob("*.exit.json"):  # an earlier launch's; each pod writes its own again
        stale.unlink()
    script = Path(rendered.job_path).with_name("launch.sh")
    start = time.monotonic()
    timed_out = False
    with open(log_path, "ab", buffering=0) as log, NodeRouter(log, on_lines) as route:
        consoles = NodeLogs(nodes)
        record = pods.write_launch(name, {"script": str(script), "endpoint": rendezvous_endpoint(),
                                          "nodes": str(nodes), "run_id": job.run_id})
        number = record["launch"]
        route.say(f"kubernetes job {name}: launch {number} on its {job.nnodes} pod(s), rendezvous on "
                  f"{record['endpoint']} (id {record['rdzv_id']})")
        proc = start_node(record)

        def cancel_launch(why: str) -> None:
            route.say(f"{why}: launch {number} cancelled on every pod")
            pods.cancel(name, number)
            end_node(proc)
            _wait_for_exits(consoles, route, nodes, job.nnodes, CANCEL_WAIT_S)

        try:
            while proc.poll() is None:
                consoles.drain(route)
                if time.monotonic() - start > timeout_s:
                    cancel_launch(f"killed after the {timeout_s:.0f} s timeout")
                    timed_out = True
                    break
                time.sleep(POLL_S)
            else:  # pod 0's node ended: the others end with the rendezvous, or are ended
                if not _wait_for_exits(consoles, route, nodes, job.nnodes, EXITS_WAIT_S):
                    cancel_launch(f"pod 0's node ended and {EXITS_WAIT_S:.0f} s later not every pod's had")
        except BaseException:
            with signals_held():  # a second Ctrl-C or SIGTERM must not cut the cancel short
                cancel_launch("interrupted")
            consoles.drain(route, final=True)
            route.close()
            raise
        exits = consoles.report(route, [])
        recorded = {n: r for n, r in exits.items() if r is not None}
        if len(recorded) < job.nnodes:
            route.say(f"{len(recorded)} of {job.nnodes} pod(s) recorded an exit")
    failed = first_failed(exits, nodes)
    ok = len(recorded) >= job.nnodes and all(r["exit_code"] == 0 for r in recorded.values())
    code = 0 if ok else (exits[failed]["exit_code"] if failed else 1)
    peak = max((r["peak_rss_bytes"] for r in recorded.values()), default=0)
    return ProcessResult(returncode=code, wall_s=time.monotonic() - start, timed_out=timed_out,
                         peak_rss_bytes=peak, tail=list(route.tail))


def _wait_for_exits(consoles: NodeLogs, route: NodeRouter, nodes: Path, nnodes: int, wait_s: float) -> bool:
    """Follow the pods' consoles until ``nnodes`` of them recorded an exit (True), or ``wait_s`` passed (False)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        consoles.drain(route)
        if _recorded(nodes, list(consoles.tails)) >= nnodes:
            return True
        time.sleep(POLL_S)
    return False
