"""Run a command in its own process group, stream its output, kill it on timeout.

Why not prefect-shell's ShellOperation or Prefect's ``timeout_seconds``: the
former has no timeout and keeps no output tail, and the latter cannot
interrupt a task blocked reading a silent child's pipe. torchrun forks worker
processes, so the whole group is signalled (``start_new_session`` +
``os.killpg``), and so is every descendant that left it (torchrun puts each rank in
a group of its own), stopped ones included; stdout/stderr are drained by two threads
so a full pipe can never deadlock the child.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil

#: Seconds between SIGTERM and SIGKILL when a run is stopped.
KILL_GRACE_S = 10.0
#: Seconds to wait for the kernel to end a process after SIGKILL.
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class ProcessResult:
    """How a command ended. ``peak_rss_bytes`` is the largest resident set of any
    process in the tree (Linux ``wait4`` rusage of the reaped children, KiB x 1024)."""

    returncode: int
    wall_s: float
    timed_out: bool
    peak_rss_bytes: int
    tail: list[str]


def run_streaming(
    argv: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
    on_line: Callable[[str], None] = lambda line: None,
    cwd: Path | None = None,
    tail_lines: int = 60,
) -> ProcessResult:
    """Run ``argv``; append every output line to ``log_path`` and pass it to ``on_line``.

    After ``timeout_s`` seconds, or when this call is interrupted, the process
    group gets SIGTERM, then SIGKILL after :data:`KILL_GRACE_S`. The log file is
    flushed per line, so a killed or crashed run keeps everything it printed;
    after a timeout ``tail`` holds the lines printed before the kill.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    lock = threading.Lock()
    start = time.monotonic()
    with open(log_path, "a", buffering=1) as log:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", bufsize=1, start_new_session=True,
        )

        def drain(stream) -> None:
            for raw in stream:
                line = raw.rstrip("\n")
                with lock:
                    log.write(line + "\n")
                    tail.append(line)
                on_line(line)

        readers = [threading.Thread(target=drain, args=(s,), daemon=True) for s in (proc.stdout, proc.stderr)]
        for reader in readers:
            reader.start()
        timed_out = threading.Event()
        tail_at_kill: list[str] = []

        def stop_job() -> None:
            with lock:
                tail_at_kill.extend(tail)  # what the job printed, not the launcher's own dying words
            # torchrun starts each rank in a process group of its own: reach them by name, taken now
            stop_group(proc.pid, KILL_GRACE_S, others=descendants(proc.pid))

        def on_timeout() -> None:
            timed_out.set()
            stop_job()

        watchdog = threading.Timer(timeout_s, on_timeout)
        watchdog.daemon = True
        watchdog.start()
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C or any error here: never leave the job running
            stop_job()
            raise
        finally:
            watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        for reader in readers:
            reader.join(timeout=30)
        if timed_out.is_set():
            _signal_group(proc.pid, signal.SIGKILL)  # leftovers that ignored SIGTERM
            log.write(f"titanflow: killed after the {timeout_s:.0f} s timeout\n")
    return ProcessResult(
        returncode=proc.returncode,
        wall_s=time.monotonic() - start,
        timed_out=timed_out.is_set(),
        peak_rss_bytes=rusage.ru_maxrss * 1024,
        tail=tail_at_kill if timed_out.is_set() else list(tail),
    )


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def descendants(pid: int) -> list[int]:
    """PIDs of every process ``pid`` started, at any depth, whatever process group or session it is in
    ([] when ``pid`` is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_group(pid: int, grace_s: float, others: Iterable[int] = ()) -> None:
    """Stop the process group led by ``pid``, and the processes ``others`` (descendants that left
    the group, e.g. in sessions of their own): SIGTERM to all, then SIGKILL to whatever still runs
    after ``grace_s`` seconds (then waits up to :data:`KILL_WAIT_S` for them). A zombie counts as stopped; nothing is reaped here (the parent's
    wait does that), so a caller blocked in ``wait4`` on ``pid`` keeps its rusage."""
    others = list(others)
    for sig in (signal.SIGTERM, signal.SIGCONT):  # SIGCONT: a stopped process acts on the SIGTERM too
        _signal_group(pid, sig)
        for other in others:
            _signal(other, sig)
    deadline = time.monotonic() + grace_s
    if all(wait_gone(p, max(0.0, deadline - time.monotonic())) for p in [pid, *others]):
        return
    _signal_group(pid, signal.SIGKILL)
    for other in others:
        _signal(other, signal.SIGKILL)
    for p in [pid, *others]:
        wait_gone(p, KILL_WAIT_S)


def wait_gone(pid: int, seconds: float) -> bool:
    """Poll up to ``seconds`` until ``pid`` no longer runs (gone, or a zombie awaiting wait4); True if it stopped."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False
