"""What each node of a multi-node job runs: the job's torchrun line, its placeholders given their value on this node,
its console into ``<nodes>/<node>.log``, and its exit recorded in ``<nodes>/<node>.exit.json`` for the train task,
which reads the exit code of every node. A Slurm job's nodes run it under ``srun`` (titanflow.launch.slurm.batch), a
Kubernetes job's pods under titanflow.launch.kubernetes.pod.

    python -m titanflow.launch.node <nodes folder> -- torchrun ... '--log-dir=.../${TITANFLOW_NODE}' ...

The node's name (:func:`node_name`) is ``TITANFLOW_NODE`` when set (a pod's name), else Slurm's
``SLURMD_NODENAME``, else the host name; it is given to the line as ``${TITANFLOW_NODE}``.

Why a module and not a line of shell: the exit record carries the node, the exit code or the signal, when it
ended and the largest resident set of the node's processes (``wait4`` of the agent, which waits for its ranks),
written atomically; a SIGTERM (``scancel``, Slurm's time limit, a pod's cancel) reaches torchrun directly and this
process outlives it to record how the agent ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from titanflow.paths import write_atomic

#: ``${NAME}`` in an argument: replaced by the variable's value on the node (titanflow.launch.render.NODE_PLACEHOLDERS).
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


#: The rendezvous of a multi-node job, as variables its torchrun line names (titanflow.launch.render.NODE_PLACEHOLDERS):
#: the endpoint (a free port on the first node) and the id (unique per launch: the Slurm job id, or the Kubernetes
#: job's id and the launch's number). The Slurm batch script (titanflow.launch.slurm.batch) or pod 0's launcher
#: (titanflow.launch.kubernetes.launch) sets them.
RDZV_ENDPOINT_ENV = "TITANFLOW_RDZV_ENDPOINT"
RDZV_ID_ENV = "TITANFLOW_RDZV_ID"

#: The variable that names the node: set by the pod (titanflow.launch.kubernetes.pod), else taken from Slurm or the host.
NODE_ENV = "TITANFLOW_NODE"


class NodeError(RuntimeError):
    """A placeholder of the launch line has no value on this node (the variable is not set)."""


def node_name() -> str:
    """This node's name: ``TITANFLOW_NODE`` (a pod's), else Slurm's (``SLURMD_NODENAME``), else the host name."""
    return os.environ.get(NODE_ENV) or os.environ.get("SLURMD_NODENAME") or os.uname().nodename


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` with every ``${NAME}`` replaced by ``env[NAME]``.

    Raises:
        NodeError: a named variable is not in ``env``.
    """
    def value(match: re.Match) -> str:
        if match[1] not in env:
            raise NodeError(f"the launch line names ${{{match[1]}}}, which is not set on node {node_name()}")
        return env[match[1]]

    return [_PLACEHOLDER.sub(value, arg) for arg in argv]


def exit_record(nodes: Path, node: str) -> Path:
    """``<nodes>/<node>.exit.json``."""
    return nodes / f"{node}.exit.json"


def log_path(nodes: Path, node: str) -> Path:
    """``<nodes>/<node>.log``: the node's console (torchrun's agent and its local rank 0)."""
    return nodes / f"{node}.log"


@contextlib.contextmanager
def signal_handlers(handlers: dict[int, object]) -> Iterator[None]:
    """``handlers`` ({signal number: handler}, as :func:`signal.signal` takes) installed for the block, then the
    process's own back, however the block ends (a caller in-process keeps its Ctrl-C and SIGTERM). Main thread
    only, as :func:`signal.signal` is."""
    earlier = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in earlier.items():
            signal.signal(sig, handler)


def run_node(nodes: Path, argv: list[str]) -> int:
    """Run ``argv`` (expanded, :func:`expand`) with its output appended to :func:`log_path`, then write
    :func:`exit_record`: ``{"node", "exit_code", "signal", "ended_at" (Unix s), "peak_rss_bytes"}``; returns the
    exit code to give Slurm (128 + signal for a killed agent, as a shell reports it)."""
    node = node_name()
    nodes.mkdir(parents=True, exist_ok=True)
    with signal_handlers({signal.SIGTERM: lambda *_: None}):  # the agent is signalled too; stay to record its end
        with open(log_path(nodes, node), "ab", buffering=0) as log:
            try:
                command = expand(argv, {**os.environ, NODE_ENV: node})
            except NodeError as err:
                log.write(f"titanflow: {err}\n".encode())
                return _record(nodes, node, 2, None, 0)
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    killed = -code if code < 0 else None
    return _record(nodes, node, 128 + killed if killed else code, killed, usage.ru_maxrss * 1024)


def _record(nodes: Path, node: str, code: int, killed: int | None, peak_rss: int) -> int:
    record = {"node": node, "exit_code": code, "signal": signal.Signals(killed).name if killed else None,
              "ended_at": time.time(), "peak_rss_bytes": peak_rss}
    write_atomic(exit_record(nodes, node), json.dumps(record) + "\n")
    return code


def main(args: list[str]) -> int:
    """``<nodes folder> -- <argv...>``."""
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m titanflow.launch.node <nodes folder> -- <command...>", file=sys.stderr)
        return 2
    return run_node(Path(args[0]), args[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
