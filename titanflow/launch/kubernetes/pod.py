"""What each pod of a titanflow Kubernetes job runs: its role from its index in the Indexed Job.

    python -m titanflow.launch.kubernetes.pod -- /bin/bash -c '<Prefect's flow-run command>'

- Pod 0 runs the flow: the command after ``--`` (Prefect's worker puts its flow-run command there,
  titanflow.launch.kubernetes.template), as a child whose SIGTERM and SIGINT it passes on (Prefect's own handling of a
  pod's termination stays the flow's). When the flow ends, it records that for the agents
  (titanflow.launch.kubernetes.pods.finish) and exits with the flow's code.
- Every other pod is an agent: it waits for a launch record of pod 0's train task, runs that launch's
  ``launch.sh`` (one torchrun agent, titanflow.launch.kubernetes.launch.start_node) and ends it when the launch is
  cancelled, then waits for the next launch (the train task's retry, the nightly's next scenario), until the flow
  ended: Kubernetes ends the agents of a Job whose pod 0 failed (``backoffLimit: 0``), so no time limit is needed;
  ``TITANFLOW_POD_WAIT_S`` sets one (seconds without a launch). It exits 0 when the flow-run command did, 1 when it
  did not or the limit passed. (Prefect's ``flow-run execute`` exits 0 for a flow run that failed: the flow run's state, in
  Prefect, is what says how it went.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from titanflow.launch.kubernetes import pods
from titanflow.launch.kubernetes.launch import end_node, start_node
from titanflow.launch.node import signal_handlers

#: The variable that bounds, in seconds, how long an agent waits for the next launch (unset: until the flow ends).
WAIT_ENV = "TITANFLOW_POD_WAIT_S"
#: Seconds between two looks at the job's launch records.
POLL_S = 1.0


def _say(text: str) -> None:
    print(f"titanflow pod: {text}", flush=True)


def run_flow(command: list[str], group: str) -> int:
    """Pod 0: run the flow ``command``, passing SIGTERM and SIGINT on; record its end for the agents; its code
    (127 for a command the image does not have, as a shell says)."""
    try:
        child = subprocess.Popen(command)
    except OSError as err:
        _say(f"the flow-run command cannot start: {err}")
        pods.finish(group, 127)
        return 127
    with signal_handlers(dict.fromkeys((signal.SIGTERM, signal.SIGINT),
                                       lambda number, _frame: child.send_signal(number))):
        code = child.wait()
    pods.finish(group, code)
    _say(f"the flow ended with exit code {code}")
    return code


def run_agent(group: str, wait_s: float | None) -> int:
    """Any other pod: run each new launch of the job until the flow ended, or ``wait_s`` seconds passed without a
    launch (None: no limit) (module docstring)."""
    ran: set[int] = set()
    deadline = None if wait_s is None else time.monotonic() + wait_s
    stop = []
    with signal_handlers({signal.SIGTERM: lambda *_: stop.append(True)}):  # the pod is being deleted
        while not stop:
            code = pods.finished(group)
            if code is not None:
                _say(f"the flow ended with exit code {code}")
                return 0 if code == 0 else 1
            waiting = {n: r for n, r in pods.launches(group).items() if n not in ran and not pods.cancelled(group, n)}
            if waiting:
                number = max(waiting)
                ran.update(n for n in waiting if n <= number)
                _say(f"launch {number}: rendezvous on {waiting[number]['endpoint']}")
                proc = start_node(waiting[number])
                while proc.poll() is None:
                    if stop or pods.cancelled(group, number) or pods.finished(group) is not None:
                        end_node(proc)
                        break
                    time.sleep(POLL_S)
                _say(f"launch {number}: the node's agent exited {proc.wait()}")
                deadline = None if wait_s is None else time.monotonic() + wait_s
                continue
            if deadline is not None and time.monotonic() > deadline:
                _say(f"no launch and no end of the flow for {wait_s:.0f} s; giving up")
                return 1
            time.sleep(POLL_S)
        return 1


def main(args: list[str]) -> int:
    """``-- <flow-run command...>``; see the module docstring."""
    if len(args) < 2 or args[0] != "--":
        print("usage: python -m titanflow.launch.kubernetes.pod -- <flow-run command...>", file=sys.stderr)
        return 2
    try:
        group, index = pods.group(), pods.index()
    except pods.PodError as err:
        print(f"titanflow pod: {err}", file=sys.stderr)
        return 2
    if index == 0:
        return run_flow(args[1:], group)
    wait = os.environ.get(WAIT_ENV)
    try:
        wait_s = None if wait is None else float(wait)
    except ValueError:
        print(f"titanflow pod: {WAIT_ENV} is {wait!r}: give seconds (a number), or leave it unset", file=sys.stderr)
        return 2
    return run_agent(group, wait_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
