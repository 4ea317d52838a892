"""A real Slurm cluster of two nodes on this machine, on loopback: Debian's slurm-wlm (22.05) and munge, one
slurmctld and one slurmd per node (slurmd's multiple-slurmd mode), everything under one scratch folder.

    python -m titanflow.launch.slurm.cluster up [--dir DIR]      # make slurm-up; prints the SLURM_CONF to export
    python -m titanflow.launch.slurm.cluster down [--dir DIR]    # make slurm-down

What runs and where (``DIR``, default ``$TMPDIR/titanflow-slurm``; it must be reachable by the ``munge`` user, so
not under a 0700 folder such as pytest's):

- ``munged`` as user munge, on its own socket ``DIR/munge/munge.socket`` with the installed key
  (/etc/munge/munge.key), so any munged of the machine is left alone; slurm.conf names the socket (AuthInfo).
- ``slurmctld`` and ``slurmd -N n1``, ``slurmd -N n2`` in the foreground, as root, from ``DIR/slurm.conf``
  (:func:`slurm_conf`): nodes n1 and n2 of one CPU each on 127.0.0.1, partition ``debug``, free ports picked at
  start, state, spool and logs under ``DIR``, an empty state each time (an earlier cluster's jobs never come back).
- ``DIR/cluster.json`` records each daemon's PID and start time; ``down`` cancels every job, then stops exactly
  those processes (SIGTERM, SIGKILL after :data:`STOP_GRACE_S`), never a process found by name.

Why own code and not a container or a Slurm test harness: the Debian packages are the cluster (as on a real
login node), and nothing here but starting them in the foreground and recording their PIDs is titanflow's. The
recipe and what was measured: the project's notes (shared/notes/slurm-here.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from titanflow.launch.process import alive, dies_with_this_thread, start_ticks

#: Where the cluster lives unless told otherwise.
DEFAULT_DIR = Path(tempfile.gettempdir()) / "titanflow-slurm"
#: The node names, one slurmd each.
NODES = ("n1", "n2")
#: The partition every node is in (the cluster's default).
PARTITION = "debug"
#: The Debian packages that hold the daemons and clients.
PACKAGES = ("slurm-wlm", "munge")
#: Seconds to wait for the cluster to report every node idle after start.
START_TIMEOUT_S = 60.0
#: Seconds between SIGTERM and SIGKILL when stopping a daemon.
STOP_GRACE_S = 10.0
#: Seconds to wait for every job to leave the queue after ``scancel`` at ``down``.
DRAIN_TIMEOUT_S = 60.0
#: The state file under the cluster folder.
STATE_FILE = "cluster.json"
_DAEMONS = ("munged", "slurmctld", "slurmd")


class ClusterError(RuntimeError):
    """The cluster cannot be started or stopped; the message says why and the fix."""


class Daemon(BaseModel):
    """One started daemon: its name, PID and start time (to tell it from a later process of the same PID)."""

    name: str = Field(description="munged, slurmctld, or slurmd-<node>")
    pid: int
    create_time: float = Field(description="psutil's start time of the process (s since the epoch)")
    start_ticks: int | None = Field(None, description="its start in clock ticks after boot, which no clock change "
                                                      "moves (titanflow.launch.process.start_ticks)")


class Cluster(BaseModel):
    """A running cluster: its folder, its slurm.conf and its daemons in the order they were started."""

    folder: str
    slurm_conf: str
    daemons: list[Daemon]

    def env(self) -> dict[str, str]:
        """The variable Slurm's commands need to talk to this cluster: ``SLURM_CONF``."""
        return {"SLURM_CONF": self.slurm_conf}


def missing_programs() -> list[str]:
    """The daemons and clients of :data:`PACKAGES` not installed here."""
    wanted = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
    return [name for name in wanted if shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]


def _which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise ClusterError(f"{name} is not installed; install {' and '.join(PACKAGES)} (as root: apt-get install -y "
                           f"{' '.join(PACKAGES)}, or make slurm-packages)")
    return found


def _free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on this machine now (the kernel's choice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def slurm_conf(folder: Path, ctld_port: int, node_ports: list[int], munge_socket: Path) -> str:
    """slurm.conf of the cluster (module docstring): one CPU and 4000 MB per node, proctrack/linuxproc and
    task/none (no cgroups in a container), no accounting, KillWait 5 s (scancel's SIGTERM to SIGKILL)."""
    nodes = "".join(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=4000 "
                    "State=UNKNOWN\n" for name, port in zip(NODES, node_ports))
    return f"""# titanflow's two-node cluster on loopback (titanflow.launch.slurm.cluster)
ClusterName=titanflow
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _state_path(folder: Path) -> Path:
    return folder / STATE_FILE


def read_cluster(folder: Path = DEFAULT_DIR) -> Cluster | None:
    """The cluster recorded in ``folder``, or None when there is none."""
    path = _state_path(folder)
    return Cluster.model_validate_json(path.read_text()) if path.is_file() else None


def _start(name: str, argv: list[str], log: Path, preexec_fn=None, **popen) -> Daemon:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=preexec_fn, **popen)  # noqa: PLW1509
    return Daemon(name=name, pid=proc.pid, create_time=psutil.Process(proc.pid).create_time(),
                  start_ticks=start_ticks(proc.pid))


def up(folder: Path = DEFAULT_DIR, *, tie_to_caller: bool = False) -> Cluster:
    """Start the cluster in ``folder`` (emptied first) and wait until every node is idle; returns it, recorded in
    ``folder/cluster.json``. ``tie_to_caller``: the daemons get SIGTERM if the calling thread dies (a test
    session), as titanflow.launch.process.dies_with_this_thread does for a launch.

    Raises:
        ClusterError: a program is missing, one is already recorded as running there, or the cluster did not come
            up within :data:`START_TIMEOUT_S` (the daemons started are stopped again; their logs are kept).
    """
    folder = Path(folder).resolve()
    running = read_cluster(folder)
    if running is not None and any(alive(d) for d in running.daemons):
        raise ClusterError(f"a cluster is already running in {folder}; stop it first: python -m "
                           f"titanflow.launch.slurm.cluster down --dir {folder}")
    programs = {name: _which(name) for name in _DAEMONS}
    if folder.exists():
        shutil.rmtree(folder)
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True)
    folder.chmod(0o755)  # munged (user munge) reaches its socket folder through it
    munge_dir = folder / "munge"
    munge_dir.mkdir(mode=0o755)
    shutil.chown(munge_dir, "munge", "munge")
    munge_socket = munge_dir / "munge.socket"
    ctld_port, *node_ports = _free_ports(1 + len(NODES))
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, ctld_port, node_ports, munge_socket))
    tie = dies_with_this_thread() if tie_to_caller else None
    munged = [_start("munged", [programs["munged"], "--foreground", f"--socket={munge_socket}",
                                 f"--pid-file={munge_dir}/munged.pid", f"--log-file={munge_dir}/munged.log",
                                 f"--seed-file={munge_dir}/munged.seed"],
                      folder / "log" / "munged.out", tie, user="munge", group="munge")]
    cluster = Cluster(folder=str(folder), slurm_conf=str(conf), daemons=munged)
    _state_path(folder).write_text(cluster.model_dump_json(indent=2) + "\n")
    try:
        _wait(lambda: munge_socket.exists(), 10.0, "munged did not open its socket", folder)
        cluster.daemons.append(_start("slurmctld", [programs["slurmctld"], "-D", "-f", str(conf)],
                              folder / "log" / "slurmctld.out", tie))
        for node in NODES:
            cluster.daemons.append(_start(f"slurmd-{node}", [programs["slurmd"], "-D", "-f", str(conf), "-N", node],
                                  folder / "log" / f"slurmd-{node}.out", tie))
        _state_path(folder).write_text(cluster.model_dump_json(indent=2) + "\n")
        _wait(lambda: _idle_nodes(cluster) == len(NODES), START_TIMEOUT_S, f"the {len(NODES)} nodes did not "
              "come up idle", folder)
    except BaseException:
        down(folder)
        raise
    return cluster


def _idle_nodes(cluster: Cluster) -> int:
    proc = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], capture_output=True, text=True,
                          env={**os.environ, **cluster.env()}, timeout=30)
    return sum(1 for line in proc.stdout.splitlines() if line.split()[1:] == ["idle"])


def _wait(ready, timeout_s: float, what: str, folder: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} within {timeout_s:.0f} s; see the logs in {folder / 'log'}")
        time.sleep(0.5)


def _cancel_jobs(cluster: Cluster) -> list[str]:
    """``scancel`` every job of the cluster and wait until the queue is empty; returns their ids."""
    env = {**os.environ, **cluster.env()}
    listed = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True, env=env, timeout=30)
    jobs = listed.stdout.split()
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, env=env, timeout=30)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True, env=env,
                             timeout=30).stdout.split() and time.monotonic() < deadline:
            time.sleep(0.5)
    return jobs


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The processes ``proc`` started (recursively), as they are now; none when it is gone."""
    try:
        return proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return "helper"


def _stop(proc: psutil.Process, what: str) -> None:
    """Wait up to :data:`STOP_GRACE_S` for ``proc`` (already told to stop, or ending with its parent), then SIGKILL
    it and wait as long again.

    Raises:
        ClusterError: it outlived SIGKILL, named ``what``.
    """
    try:
        proc.wait(STOP_GRACE_S)
        return
    except psutil.TimeoutExpired:
        proc.kill()
    except psutil.NoSuchProcess:
        return
    try:
        proc.wait(STOP_GRACE_S)
    except psutil.TimeoutExpired:
        raise ClusterError(f"{what} outlived SIGKILL") from None


def down(folder: Path = DEFAULT_DIR) -> list[Daemon]:
    """Stop the cluster recorded in ``folder``: cancel its jobs (while slurmctld runs), then SIGTERM the recorded
    daemons, slurmd first, and SIGKILL any still running after :data:`STOP_GRACE_S`; the processes a daemon started
    (slurmctld's slurmscriptd, a slurmd's slurmstepd) get the same grace to end with it, then SIGKILL. Returns the
    daemons that were running. The folder (logs, slurm.conf) is kept; its record is removed.

    Raises:
        ClusterError: a daemon, or a process it started, outlived SIGKILL.
    """
    folder = Path(folder).resolve()
    cluster = read_cluster(folder)
    if cluster is None:
        return []
    if any(d.name == "slurmctld" and alive(d) for d in cluster.daemons):
        try:
            _cancel_jobs(cluster)
        except (OSError, subprocess.SubprocessError):  # the daemons are stopped whatever the queue says
            pass
    running = [(d, p) for d in reversed(cluster.daemons) if (p := alive(d)) is not None]
    for daemon, proc in running:
        helpers = _descendants(proc)  # slurmctld's slurmscriptd, slurmd's slurmstepd: they may outlive it a moment
        proc.send_signal(signal.SIGTERM)
        for process in [proc, *helpers]:
            _stop(process, f"{daemon.name} (pid {daemon.pid})" if process is proc else
                  f"{daemon.name}'s {_name(process)} (pid {process.pid})")
    _state_path(folder).unlink()
    return [daemon for daemon, _ in running]


def main(argv: list[str] | None = None) -> int:
    """``up`` or ``down`` (module docstring); 0 on success, 1 with the reason on stderr."""
    parser = argparse.ArgumentParser(prog="python -m titanflow.launch.slurm.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"the cluster's folder (default {DEFAULT_DIR})")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = up(args.dir)
            print(f"slurm cluster up: nodes {', '.join(NODES)} (partition {PARTITION}); "
                  f"daemons {', '.join(f'{d.name}={d.pid}' for d in cluster.daemons)}\n"
                  f"export SLURM_CONF={cluster.slurm_conf}")
        else:
            stopped = down(args.dir)
            print(f"slurm cluster down: stopped {', '.join(f'{d.name}={d.pid}' for d in stopped) or 'nothing'}")
    except ClusterError as err:
        print(f"titanflow: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
