"""A training launch as one Slurm job: submit the job's batch script (titanflow.launch.slurm.batch), follow it, stream
every node's console, and cancel it (``scancel``) on the timeout, an interrupt or a Prefect cancel, so nothing is
left on any node.

What a launch writes, under the run folder:

- ``train/nodes/<node>.log``: each node's console (its torchrun agent and local rank 0), written by the node
  (titanflow.launch.node); ``train/nodes/<node>.exit.json``: how the node's agent ended.
- ``train/nodes/batch-<job id>.log``: the batch script's own output (the rendezvous endpoint, srun's messages).
- ``train/nodes/jobs.txt``: every job id the run submitted, one a line: a later launch of the run cancels any of
  them Slurm still runs (a runner killed outright cannot cancel its own).
- ``train.log``: what the run's curve, resume and judge read, as for one node: the console of the node that holds
  global rank 0 (torchrun prefixes its lines ``[default0]:``, titanflow.launch.render.RANK_PREFIX), every line of
  the batch log prefixed ``slurm:``, and titanflow's own lines (submitted, state, each node's exit, the last
  lines of the node that failed first, prefixed with its name).

The Prefect log gets every node's lines, each prefixed ``[<node>]``, and the batch log's, prefixed ``[slurm]``.

The state comes from ``scontrol show job`` (Slurm keeps a finished job there for its MinJobAge, 300 s by
default; ``sacct`` needs an accounting database, which a cluster may not run); each node's exit code from its
exit record. The timeout counts from the job's start; a job still pending after as long is cancelled too.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from titan_cfg.job import Job
from titanflow import paths
from titanflow.launch import nodes as node_logs
from titanflow.launch.nodes import NodeLog, NodeLogs, NodeRouter, first_failed, nodes_dir, signals_held
from titanflow.launch.process import KILL_GRACE_S, ProcessResult
from titanflow.launch.slurm.batch import job_name
from titanflow.launch.slurm.settings import SlurmSettings

#: Seconds between two reads of the node logs.
POLL_S = 0.5
#: Seconds between two ``scontrol show job`` of a running job.
STATE_EVERY_S = 2.0
#: Seconds to wait, after ``scancel``, for Slurm to end every process of the job: its KillWait (30 s by default,
#: between SIGTERM and SIGKILL) and a margin.
CANCEL_WAIT_S = 60.0
#: Seconds a Slurm command may take before it counts as failed.
COMMAND_TIMEOUT_S = 60.0
#: Job states after which nothing of the job runs (Slurm's job state codes).
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
#: The batch log of a job, under the nodes folder (sbatch ``--output``; ``%j`` is the job id).
BATCH_LOG = "batch-%j.log"
#: The job ids a run submitted, under the nodes folder.
JOBS_FILE = "jobs.txt"


class SlurmError(RuntimeError):
    """A Slurm command failed or refused; the message carries Slurm's own words."""


def slurm_command(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm client command (``sbatch``, ``scontrol``, ``scancel``, ``squeue``) and return it, whatever its
    exit code.

    Raises:
        SlurmError: the command is not installed here, or did not answer within :data:`COMMAND_TIMEOUT_S`.
    """
    try:
        # a session of its own: a Ctrl-C at the terminal interrupts titanflow, which cancels the job, not the
        # scancel it runs to do so
        return subprocess.run(args, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S,
                              cwd=paths.REPO_ROOT, start_new_session=True)
    except FileNotFoundError:
        raise SlurmError(f"slurm: {args[0]} is not installed here; run from the cluster's login node (or start a "
                         "cluster here: make slurm-up)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"slurm: {shlex.join(args)} did not answer within {COMMAND_TIMEOUT_S:.0f} s; is slurmctld "
                         "up (scontrol ping)?") from None


def _said(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").replace("\n", "; ")


def job_state(job_id: str) -> dict[str, str] | None:
    """``scontrol show job <id>``'s fields (``JobState``, ``ExitCode``, ``NodeList``, ``Reason``, ...) or None when
    Slurm no longer knows the job.

    Raises:
        SlurmError: scontrol failed for another reason (its message).
    """
    proc = slurm_command(["scontrol", "show", "job", "--oneliner", job_id])
    if proc.returncode:
        if "Invalid job id" in proc.stderr:
            return None
        raise SlurmError(f"slurm: scontrol show job {job_id}: {_said(proc)}")
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm node list (``n[1-2]`` -> ``["n1", "n2"]``), as ``scontrol show hostnames`` expands
    it; [] for an empty list."""
    if not nodelist or nodelist == "(null)":
        return []
    proc = slurm_command(["scontrol", "show", "hostnames", nodelist])
    return proc.stdout.split() if proc.returncode == 0 else [nodelist]


def time_limit(timeout_s: float) -> str:
    """sbatch ``--time`` for a launch of ``timeout_s`` seconds: whole minutes, rounded up, plus one for the
    cancel's grace (Slurm ends the job itself if its follower is gone)."""
    return str(math.ceil((timeout_s + KILL_GRACE_S) / 60) + 1)


def submission_env() -> dict[str, str]:
    """The environment sbatch exports to the job: this one, with this Python's ``bin`` first on PATH, so that
    ``python`` and ``torchrun`` on every node are this environment's (the nodes share its file system)."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def sbatch_options(job: Job, timeout_s: float, settings: SlurmSettings) -> list[str]:
    """What titanflow adds to the batch script's own ``#SBATCH`` lines: ``--time`` (:func:`time_limit`), the batch
    log (:data:`BATCH_LOG` under the nodes folder), the site's settings."""
    return [f"--time={time_limit(timeout_s)}", f"--output={nodes_dir(job) / BATCH_LOG}", *settings.options()]


def _test_only(nnodes: int, timeout_s: float, settings: SlurmSettings) -> subprocess.CompletedProcess:
    """``sbatch --test-only`` of a job as titanflow submits one: ``nnodes`` nodes, one task each, the nodes to itself,
    the time limit of ``timeout_s`` and the site's ``settings``."""
    return slurm_command(["sbatch", "--test-only", f"--nodes={nnodes}", "--ntasks-per-node=1", "--exclusive",
                          f"--time={time_limit(timeout_s)}", *settings.options(), "--wrap=true"])


def sbatch_test_only(nnodes: int, timeout_s: float, settings: SlurmSettings) -> None:
    """Ask Slurm whether it would run a job of ``nnodes`` nodes (one task each, the nodes to itself) for
    ``timeout_s`` with ``settings``, without submitting it (``sbatch --test-only``).

    Raises:
        SlurmError: Slurm refused (its message: no such partition, more nodes than the partition has, a time
            limit past the partition's) or cannot be reached.
    """
    proc = _test_only(nnodes, timeout_s, settings)
    if proc.returncode:
        where = f"partition {settings.partition}" if settings.partition else "the default partition"
        raise SlurmError(f"slurm: Slurm refuses {nnodes} node(s) on {where}: {_said(proc)}")


def check_submission(nnodes: int, timeout_s: float) -> None:
    """Preflight of a run on Slurm: :func:`sbatch_test_only` with this environment's settings, as a ValueError that names
    the fields to change.

    Raises:
        ValueError: ``nnodes: ...`` with Slurm's refusal and the fix.
    """
    try:
        settings = SlurmSettings.from_env()
        sbatch_test_only(nnodes, timeout_s, settings)
    except SlurmError as err:
        raise ValueError(f"nnodes: {err}; fix: pass --nnodes the partition has (sinfo) or set "
                         f"TITANFLOW_SLURM_PARTITION, or check SLURM_CONF") from None


def planned_nodes(nnodes: int, timeout_s: float, settings: SlurmSettings) -> list[str]:
    """The nodes Slurm would give a job of ``nnodes`` now (``sbatch --test-only``: "... on nodes n[1-2] ...").

    Raises:
        SlurmError: Slurm refused, or named no nodes.
    """
    proc = _test_only(nnodes, timeout_s, settings)
    found = re.search(r" on nodes (\S+)", proc.stderr + proc.stdout)
    if proc.returncode or found is None:
        raise SlurmError(f"slurm: sbatch --test-only named no nodes for {nnodes} node(s): {_said(proc)}")
    return hostnames(found[1])


def node_hosts(nodes: list[str]) -> list[str]:
    """The machine each Slurm node runs on (its NodeHostName, else its name), with this machine's own names
    (localhost, a loopback address) as ``socket.gethostname()``: the hosts whose training slots a job holds
    (titanflow.prefect_ops.slot.node_slots)."""
    local = {"localhost", socket.gethostname(), socket.getfqdn()}
    hosts = []
    for node in nodes:
        proc = slurm_command(["scontrol", "show", "node", node])
        fields = dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}
        host = fields.get("NodeHostName") or node
        hosts.append(socket.gethostname() if host in local or host.startswith("127.") else host)
    return hosts


def submit(job: Job, batch_script: Path, timeout_s: float, settings: SlurmSettings,
           nodes: list[str] | None = None) -> str:
    """``sbatch`` the batch script (:func:`sbatch_options`, :func:`submission_env`), on exactly ``nodes`` when given
    (``--nodelist``); returns the job id.

    Raises:
        SlurmError: Slurm refused the job (its message).
    """
    pinned = [f"--nodelist={','.join(nodes)}"] if nodes else []
    proc = slurm_command(["sbatch", "--parsable", *sbatch_options(job, timeout_s, settings), *pinned,
                          str(batch_script)], env=submission_env())
    if proc.returncode:
        raise SlurmError(f"slurm: sbatch refused the job: {_said(proc)}")
    return proc.stdout.strip().split(";")[0]


def cancel(job_id: str, wait_s: float = CANCEL_WAIT_S) -> str | None:
    """``scancel`` the job, then wait up to ``wait_s`` until Slurm says nothing of it runs (a final state, not
    completing); returns that state, None when Slurm no longer knows the job.

    Raises:
        SlurmError: the job still runs after ``wait_s`` (its state says where).
    """
    slurm_command(["scancel", job_id])
    deadline = time.monotonic() + wait_s
    while True:
        state = job_state(job_id)
        if state is None or (state.get("JobState") in FINAL_STATES and "COMPLETING" not in state.get("JobState", "")):
            return state.get("JobState") if state else None
        if time.monotonic() > deadline:
            raise SlurmError(f"slurm: job {job_id} still {state.get('JobState')} on {state.get('NodeList')} "
                             f"{wait_s:.0f} s after scancel")
        time.sleep(POLL_S)


def running_jobs(nodes: Path) -> list[str]:
    """Ids of the jobs of :data:`JOBS_FILE` under ``nodes`` that Slurm still runs (or holds pending)."""
    recorded = nodes / JOBS_FILE
    running = []
    for job_id in (recorded.read_text().split() if recorded.is_file() else []):
        state = job_state(job_id)
        if state is not None and state.get("JobState") not in FINAL_STATES:
            running.append(job_id)
    return running


def end_leftovers(nodes: Path) -> list[str]:
    """Cancel (:func:`cancel`) the jobs of :data:`JOBS_FILE` Slurm still runs; returns their ids."""
    ended = running_jobs(nodes)
    for job_id in ended:
        cancel(job_id)
    return ended


def recover_rank0_steps(nodes: Path, log_path: Path) -> list[int]:
    """:func:`titanflow.launch.nodes.recover_rank0_steps` once the run's jobs Slurm still runs are cancelled
    (:func:`end_leftovers`), so that the node logs are final; returns the steps copied into train.log."""
    if not nodes.is_dir():
        return []
    end_leftovers(nodes)
    return node_logs.recover_rank0_steps(nodes, log_path)


def run_job(rendered, *, timeout_s: float, log_path: Path, on_lines: Callable[[list[str]], None] = lambda _: None,
            settings: SlurmSettings | None = None,
            hold_nodes: Callable[[list[str]], contextlib.AbstractContextManager] | None = None) -> ProcessResult:
    """Submit the rendered Slurm job (its ``job/launch.sh``), follow it to its end and return how it ended, as
    :func:`titanflow.launch.process.run_streaming` does for one node: ``returncode`` 0 when the job COMPLETED and
    every node's agent exited 0 (else the exit code of the node that failed first, else 1), ``timed_out`` when
    the timeout (counted from the job's start, or spent pending) cancelled it, ``peak_rss_bytes`` the largest of
    the nodes' records, ``tail`` the last lines streamed. Jobs of earlier launches of the run still running are
    cancelled first (:func:`end_leftovers`). Interrupted (Ctrl-C, a Prefect cancel's signal), it cancels the job
    and waits for Slurm to end it on every node, then re-raises.

    ``hold_nodes(hosts)``: a context held from before submission to the job's end over the hosts of the nodes
    Slurm would give it (:func:`planned_nodes`, :func:`node_hosts`), the job then pinned to those nodes
    (``--nodelist``): the train task holds their training slots (titanflow.prefect_ops.slot.node_slots) so that no
    node trains two runs at once; the wait is not part of the timeout.

    Raises:
        SlurmError: sbatch refused the job, or the job outlived its cancel.
    """
    job = Job.read(Path(rendered.job_path))
    settings = settings or SlurmSettings.from_env()
    nodes = nodes_dir(job)
    nodes.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "ab", buffering=0) as log, NodeRouter(log, on_lines) as route:
        for job_id in end_leftovers(nodes):
            route.say(f"cancelled slurm job {job_id}, left running by an earlier launch of this run")
        for stale in nodes.glob("*.exit.json"):  # an earlier launch's; each node writes its own again
            stale.unlink()
        follower = _Follower(job, route, nodes)
        pinned, held = None, contextlib.nullcontext()
        if hold_nodes is not None:
            pinned = planned_nodes(job.nnodes, timeout_s, settings)
            hosts = node_hosts(pinned)
            route.say(f"nodes {', '.join(pinned)} (hosts {', '.join(sorted(set(hosts)))}): taking their training "
                      "slots")
            held = hold_nodes(hosts)
        with held:
            job_id = submit(job, Path(rendered.job_path).with_name("launch.sh"), timeout_s, settings, pinned)
            with open(nodes / JOBS_FILE, "a") as recorded:
                recorded.write(job_id + "\n")
            route.say(f"slurm job {job_id} ({job_name(job.run_id)}) submitted: {job.nnodes} node(s) x "
                      f"{job.nproc_per_node} rank(s), {' '.join(sbatch_options(job, timeout_s, settings))}")
            state, timed_out = follower.follow(job_id, timeout_s)
        exits = follower.report(job_id, state)
    failed = first_failed(exits, nodes)
    ok = state.get("JobState") == "COMPLETED" and all(r is not None and r["exit_code"] == 0 for r in exits.values())
    code = 0 if ok else (exits[failed]["exit_code"] if failed else 1)
    peak = max((r["peak_rss_bytes"] for r in exits.values() if r), default=0)
    return ProcessResult(returncode=code, wall_s=time.monotonic() - start, timed_out=timed_out,
                         peak_rss_bytes=peak, tail=list(route.tail))


class _Follower:
    """Follows one job of a launch: its state, its batch log and every node's console (module docstring)."""

    def __init__(self, job: Job, route: NodeRouter, nodes: Path):
        self.job, self.route, self.nodes = job, route, nodes
        self.consoles = NodeLogs(nodes)
        self.batch: NodeLog | None = None

    def drain(self, final: bool = False) -> None:
        """Route every new line of the batch log and the node logs (``final``: their last lines too)."""
        for line in self.batch.lines(final) if self.batch else []:
            self.route.scheduler("slurm", line)
        self.consoles.drain(self.route, final)

    def follow(self, job_id: str, timeout_s: float) -> tuple[dict[str, str], bool]:
        """Stream until the job ends, or cancel it past ``timeout_s`` from its start (or pending as long), or when
        interrupted (then re-raised); returns (its last state, timed out)."""
        self.batch = NodeLog(self.nodes / BATCH_LOG.replace("%j", job_id))
        self.batch.offset = 0
        begun, started, seen, next_state, state = time.monotonic(), None, None, 0.0, {}
        try:
            while True:
                self.drain()
                now = time.monotonic()
                if now >= next_state:
                    next_state = now + STATE_EVERY_S
                    state = job_state(job_id) or {"JobState": "GONE"}
                    current = state.get("JobState")
                    if current != seen:
                        seen = current
                        where = state.get("NodeList") if current == "RUNNING" else state.get("Reason")
                        self.route.say(f"slurm job {job_id} {current}" + (f" ({where})" if where not in (None, "None")
                                                                         else ""))
                    if current == "RUNNING" and started is None:
                        started = now
                    if current in FINAL_STATES or current == "GONE":
                        return state, False
                if now - (started or begun) > timeout_s:
                    self.route.say(f"killed after the {timeout_s:.0f} s timeout: scancel {job_id}")
                    return {**state, "JobState": cancel(job_id) or "GONE"}, True
                time.sleep(POLL_S)
        except BaseException:
            self.route.say(f"interrupted: scancel {job_id}")
            with signals_held():  # a second Ctrl-C or SIGTERM must not cut the cancel short
                cancel(job_id)
            self.drain(final=True)
            self.route.close()
            raise

    def report(self, job_id: str, state: dict[str, str]) -> dict[str, dict | None]:
        """The last lines, each node's exit and the last lines of the node that failed first
        (:meth:`titanflow.launch.nodes.NodeLogs.report`), then the job's end, into train.log and the Prefect log;
        returns the nodes' exit records."""
        for line in self.batch.lines(final=True) if self.batch else []:
            self.route.scheduler("slurm", line)
        exits = self.consoles.report(self.route, hostnames(state.get("NodeList", "")))
        self.route.say(f"slurm job {job_id} ended {state.get('JobState', 'GONE')}, ExitCode "
                       f"{state.get('ExitCode', '?')}")
        return exits
