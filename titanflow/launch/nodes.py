"""The nodes of a multi-node launch (a Slurm job, a Kubernetes job's pods), as the train task follows them: each
node's console and exit record (written by the node itself, titanflow.launch.node), routed line by line.

What a launch writes, under the run folder:

- ``train/nodes/<node>.log``: each node's console (its torchrun agent and local rank 0);
  ``train/nodes/<node>.exit.json``: how the node's agent ended.
- ``train.log``: what the run's curve, resume and judge read, as for one node: the console of the node that holds
  global rank 0 (torchrun prefixes its lines ``[default0]:``, titanflow.launch.render.RANK_PREFIX), the
  scheduler's own lines prefixed with its name, and titanflow's own lines (each node's exit, the last lines of the
  node that failed first, prefixed with its name).

The Prefect log gets every node's lines, each prefixed ``[<node>]``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from titan_cfg.job import Job
from titanflow.launch.forward import LineForwarder
from titanflow.launch.node import exit_record, signal_handlers
from titanflow.launch.node import log_path as node_log_path
from titanflow.launch.root_cause import first_rank_error, lost_peer

#: The folder under the job's dump folder (``runs/<id>/train/``) that holds each node's console and exit record.
NODES_FOLDER = "nodes"
#: Logs in the nodes folder that are not a node's console (a Slurm job's batch log, ``batch-<job id>.log``).
OTHER_LOG_PREFIX = "batch-"
#: Lines of the node that failed first copied into train.log (step lines left out).
FAILED_NODE_LINES = 40
#: The first console line of global rank 0 (torchrun's prefix with the global rank).
RANK0 = re.compile(r"^\[default0\]:")
#: A torchtitan step line (they are left out of the failed node's lines copied into train.log: its ranks are not
#: rank 0, and the curve is rank 0's).
STEP_LINE = re.compile(r"step:\s*\d+\s+loss:")


def nodes_dir(job: Job) -> Path:
    """``runs/<id>/train/nodes``: each node's ``<node>.log`` and ``<node>.exit.json``."""
    return Path(job.dump_folder) / NODES_FOLDER


def is_node_log(path: Path) -> bool:
    """A node's console (``<node>.log``), not another log of the nodes folder."""
    return path.suffix == ".log" and not path.name.startswith(OTHER_LOG_PREFIX)


def signals_held() -> contextlib.AbstractContextManager:
    """SIGINT and SIGTERM ignored for the block (in the main thread, the only one that can set handlers), then
    their handlers back (:func:`titanflow.launch.node.signal_handlers`); elsewhere the block runs as it is. A
    cancel of the nodes runs under it: a second Ctrl-C or SIGTERM must not cut it short."""
    if threading.current_thread() is not threading.main_thread():
        return contextlib.nullcontext()
    return signal_handlers(dict.fromkeys((signal.SIGINT, signal.SIGTERM), signal.SIG_IGN))


def recover_rank0_steps(nodes: Path, log_path: Path) -> list[int]:
    """Copy into train.log (``log_path``) the rank-0 step lines the node logs under ``nodes`` hold for steps after
    the last one train.log has: the lines a launch's follower never copied because it was killed (a flow process
    SIGKILLed while its nodes trained on); the caller ends what still runs of the launch first, so that the node
    logs are final. Each step's latest line is taken (node logs are appended launch after launch; the
    newest log is read last), under one titanflow line naming the steps and the logs. Returns the steps copied.

    Why: train.log is what the curve, resume and the judge read; without the steps the next launch would resume
    from a checkpoint past the curve's end and the run could never be judged whole.
    """
    from titanflow.launch.metrics import log_lines, parse_step_line, run_curve  # lazy: pandas

    if not nodes.is_dir():
        return []
    curve = run_curve(log_path)  # the run's curve so far, launches folded
    logged = int(curve.step.max()) if not curve.empty else 0
    found: dict[int, tuple[str, str]] = {}
    for node_log in sorted(nodes.glob("*.log"), key=lambda p: p.stat().st_mtime):
        if not is_node_log(node_log):
            continue
        for line in log_lines(node_log):
            row = parse_step_line(line) if RANK0.match(line) else None
            if row is not None and row["step"] > logged:
                found[row["step"]] = (line, node_log.name)
    steps = sorted(found)
    if steps:
        sources = ", ".join(sorted({found[s][1] for s in steps}))
        with open(log_path, "a") as log:
            log.write(f"titanflow: steps {steps[0]}-{steps[-1]} recovered from {sources} (an earlier launch's "
                      "follower ended before copying them)\n")
            log.writelines(found[step][0] + "\n" for step in steps)
    return steps


class NodeLog:
    """New complete lines of a file that grows (from where it ended when the tail began; ``offset`` 0 reads it
    from its start)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size if path.is_file() else 0
        self.rest = b""

    def lines(self, final: bool = False) -> list[str]:
        if self.path.is_file():
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
            self.offset += len(data)
            self.rest += data
        *complete, self.rest = self.rest.split(b"\n")
        if final and self.rest:
            complete, self.rest = [*complete, self.rest], b""
        return [line.decode("utf-8", "replace").removesuffix("\r") for line in complete]


class NodeRouter:
    """Where each line of a launch goes (module docstring): the Prefect log (``on_lines``, in batches on a thread of
    its own: titanflow.launch.forward) and the tail get every line, prefixed with its node; train.log (``log``, a
    binary file) the rank-0 node's lines as they are, once that node is known (held until then). Used as a context
    manager: at its end the callback gets the lines still queued."""

    def __init__(self, log, on_lines: Callable[[list[str]], None], tail_lines: int = 60):
        self.log = log
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.rank0_node: str | None = None
        self.held: dict[str, list[str]] = collections.defaultdict(list)
        self.forwarder = LineForwarder(on_lines, note=self.write)

    def __enter__(self) -> "NodeRouter":
        return self

    def __exit__(self, *_) -> None:
        self.forwarder.close()

    def _emit(self, text: str) -> None:
        self.tail.append(text)
        self.forwarder.put(text)

    def write(self, text: str) -> None:
        self.log.write((text + "\n").encode())

    def say(self, text: str) -> None:
        """titanflow's own line: train.log and the Prefect log."""
        self.write(f"titanflow: {text}")
        self._emit(f"titanflow: {text}")

    def scheduler(self, name: str, line: str) -> None:
        """A line of the scheduler's own log (``name``: slurm): train.log as ``<name>: line``, the Prefect log
        as ``[<name>] line``."""
        self.write(f"{name}: {line}")
        self._emit(f"[{name}] {line}")

    def node(self, node: str, line: str) -> None:
        self._emit(f"[{node}] {line}")
        if self.rank0_node is None:
            self.held[node].append(line)
            if RANK0.match(line):
                self.rank0_node = node
                for held in self.held.pop(node):
                    self.write(held)
                self.held.clear()
        elif node == self.rank0_node:
            self.write(line)

    def close(self) -> None:
        """Lines still held (no node showed rank 0): into train.log, each prefixed with its node."""
        for node, lines in self.held.items():
            for line in lines:
                self.write(f"[{node}] {line}")
        self.held.clear()


def node_exits(nodes: Path, names: list[str]) -> dict[str, dict | None]:
    """{node: its exit record (titanflow.launch.node), None when it wrote none (its scheduler ended it first)}."""
    found = {}
    for name in names:
        path = exit_record(nodes, name)
        found[name] = json.loads(path.read_text()) if path.is_file() else None
    return found


def first_failed(exits: dict[str, dict | None], nodes: Path | None = None) -> str | None:
    """The node that failed first, None when none failed: of the nodes with a non-zero exit record, the one whose
    agent exited first; with ``nodes`` (the launch's nodes folder), a node whose first failing rank's own error
    (:func:`node_rank_error`) is only a lost peer (titanflow.launch.root_cause.lost_peer) comes after every other.
    Which agent exits first is a race a rank that lost its peer can win: srun or the pods then end the other agent,
    whose rank failed first, before it exits on its own."""
    failed = [(r["ended_at"], n) for n, r in exits.items() if r is not None and r["exit_code"] != 0]

    def order(item: tuple[float, str]) -> tuple[bool, float, str]:
        error = node_rank_error(nodes, item[1]) if nodes is not None else None
        return error is not None and lost_peer(error.message), *item

    return min(failed, key=order)[1] if failed else None


def exit_words(record: dict | None) -> str:
    if record is None:
        return "no exit recorded (its scheduler ended it)"
    return f"killed by {record['signal']}" if record["signal"] else f"exit {record['exit_code']}"



def last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``path`` that are not step lines (:data:`STEP_LINE`)."""
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines if not STEP_LINE.search(line)][-count:]



def node_rank_error(nodes: Path, node: str):
    """The first failing rank's own error on ``node`` (titanflow.launch.root_cause.first_rank_error: its rank logs
    under ``train/ranks/<node>`` and its console), with its local rank; None when it left none."""
    console = "\n".join(last_lines(node_log_path(nodes, node), 200))
    return first_rank_error(nodes.parent / "ranks" / node, console)


def first_node_error(job: Job):
    """The root cause of a failed multi-node launch: on the node that failed first (:func:`first_failed`), its first
    failing rank's own error from its rank logs and console (titanflow.launch.root_cause.first_rank_error), with
    its global rank (the local one on that node when torchrun's report does not pair them) and the message
    prefixed ``node <name>:``; None when no node recorded a failure."""
    nodes = nodes_dir(job)
    names = sorted(p.name.removesuffix(".exit.json") for p in nodes.glob("*.exit.json"))
    failed = first_failed(node_exits(nodes, names), nodes)
    if failed is None:
        return None
    found = node_rank_error(nodes, failed)
    if found is None:
        return None
    console = "\n".join(last_lines(node_log_path(nodes, failed), 200))
    # the rank as the job knows it: torchrun's failure report on that node pairs the global rank with the local one
    pairs = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", console)
    rank = next((int(g) for g, local in reversed(pairs) if int(local) == found.rank), found.rank)
    return found.model_copy(update={"rank": rank, "message": f"node {failed}: {found.message}"})


class NodeLogs:
    """The consoles of a launch's nodes under ``nodes``, each read from where it ended when the launch began (a log
    already there is an earlier launch's; one that appears later is read from its start)."""

    def __init__(self, nodes: Path):
        self.nodes = nodes
        self.tails = {p.stem: NodeLog(p) for p in nodes.glob("*.log") if is_node_log(p)}

    def drain(self, route: NodeRouter, final: bool = False) -> None:
        """Route every new line of every node's console (``final``: their last lines too)."""
        for path in sorted(self.nodes.glob("*.log")):
            if is_node_log(path) and path.stem not in self.tails:
                self.tails[path.stem] = NodeLog(path)
                self.tails[path.stem].offset = 0
        for name, tail in self.tails.items():
            for line in tail.lines(final):
                route.node(name, line)

    def report(self, route: NodeRouter, names: list[str]) -> dict[str, dict | None]:
        """The last lines, then the exit of each node of ``names`` (all that logged when empty) and the last lines of
        the node that failed first, into train.log and the Prefect log; returns the nodes' exit records."""
        self.drain(route, final=True)
        route.close()
        exits = node_exits(self.nodes, names or sorted(self.tails))
        for name, record in exits.items():
            route.say(f"node {name}: {exit_words(record)}")
        failed = first_failed(exits, self.nodes)
        if failed is not None:
            route.write(f"titanflow: node {failed} failed first; its last lines:")
            for line in last_lines(node_log_path(self.nodes, failed), FAILED_NODE_LINES):
                route.write(f"[{failed}] {line}")
        return exits
