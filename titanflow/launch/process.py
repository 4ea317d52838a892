"""Run a command in its own process group, stream its output, kill it on timeout.

Why not prefect-shell's ShellOperation or Prefect's ``timeout_seconds``: the
former has no timeout and keeps no output tail, and the latter cannot
interrupt a task blocked reading a silent child's pipe. torchrun forks worker
processes, so the whole group is signalled (``start_new_session`` +
``os.killpg``), and so is every descendant that left it (torchrun puts each rank in
a group of its own), stopped ones included; stdout/stderr are drained by two threads
so a full pipe can never deadlock the child.

Bounds (one line of a child's output can be megabytes, a grandchild can hold the pipes):

- Memory: the pipes are read :data:`READ_BYTES` at a time. The log file gets every byte; the
  per-line callback and the tail get at most :data:`LINE_BYTES` of a line (a longer one ends in
  `` ... [N bytes cut]``). Held per pipe: one read, the unwritten part of the current line
  (at most :data:`LOG_HOLD_BYTES`, so lines of stdout and stderr reach the log whole up to that
  length) and the line's first :data:`LINE_BYTES`; the tail holds at most
  ``tail_lines`` x :data:`LINE_BYTES`.
- A slow callback: ``on_lines`` gets the lines in batches on a thread of its own
  (titanflow.launch.forward): a full queue holds the pipe readers back while the callback keeps taking lines,
  lines skip a callback stuck for :data:`titanflow.launch.forward.STALL_S` (the log and the tail keep them, and
  the log says how many), an exception of the callback is written to the log once and the launch goes on; at the
  end the callback gets :data:`titanflow.launch.forward.DRAIN_S` to catch up.
- Time: once the launched process exits, its output gets :data:`EXIT_GRACE_S` to end; then its
  group and every process of the launch still running are ended (SIGTERM, SIGKILL after
  :data:`LEFTOVER_GRACE_S`), and the call returns.
- The runner's death: on Linux the launched process gets SIGTERM when the thread that started
  it dies, SIGKILL of the whole flow process included (``PR_SET_PDEATHSIG``); torchrun ends its
  ranks on SIGTERM. Every process of a launch carries :data:`LAUNCH_ENV` naming the runner, so
  whatever still outlives a killed runner is ended by the next launch (:func:`end_orphans`).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from titanflow.launch.forward import LineForwarder

#: Seconds between SIGTERM and SIGKILL when a run is stopped.
KILL_GRACE_S = 10.0
#: Seconds to wait for the kernel to end a process after SIGKILL.
KILL_WAIT_S = 5.0
#: Seconds the launched process's output may stay open after it exited (a descendant that inherited
#: the pipes holds them); then what the launch left running is ended.
EXIT_GRACE_S = 5.0
#: Seconds between SIGTERM and SIGKILL for what a launch left running after it exited.
LEFTOVER_GRACE_S = 2.0
#: Most UTF-8 bytes of one output line the callback (the Prefect log) and the tail get, cut marker
#: included; the log file keeps the whole line. torchtitan's step line is about 200 bytes.
LINE_BYTES = 4096
#: Bytes read from a pipe at a time (a Linux pipe buffer holds 64 KiB).
READ_BYTES = 64 * 1024
#: Most bytes of an unfinished line held back from the log file, so that a line of stdout and one
#: of stderr do not interleave in it; a longer line is written in pieces as it arrives.
LOG_HOLD_BYTES = 256 * 1024
#: Environment variable every process of a launch inherits: ``<runner pid>:<runner start time>:<launch id>``.
LAUNCH_ENV = "TITANFLOW_LAUNCH"

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class ProcessResult:
    """How a command ended. ``peak_rss_bytes`` is the largest resident set of any
    process in the tree (Linux ``wait4`` rusage of the reaped children, KiB x 1024).
    ``tail``: the last ``tail_lines`` output lines, each at most :data:`LINE_BYTES` bytes of UTF-8."""

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
    on_lines: Callable[[list[str]], None] = lambda lines: None,
    cwd: Path | None = None,
    tail_lines: int = 60,
) -> ProcessResult:
    """Run ``argv``; append all its output to ``log_path`` and pass its lines to ``on_lines``, in order, in batches.

    ``on_lines`` and the result's ``tail`` get each line without its newline, cut to
    :data:`LINE_BYTES`; the log file gets every byte. ``on_lines`` runs on a thread of its own and never
    holds up the log (module docstring: a slow callback); an exception it raises is logged, not raised. After ``timeout_s`` seconds, or when this
    call is interrupted, the process group and the launch's other processes get SIGTERM, then
    SIGKILL after :data:`KILL_GRACE_S`. Once the launched process exits, this call returns within
    :data:`EXIT_GRACE_S` + :data:`LEFTOVER_GRACE_S` (+ :data:`KILL_WAIT_S` for a process that
    outlives SIGKILL), having ended the launch's group and leftovers. Processes a killed runner
    left (see :func:`end_orphans`) are ended before the launch. The log file is written as output
    arrives, so a killed or crashed run keeps everything it printed; after a timeout ``tail``
    holds the lines printed before the kill.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    launch_id = f"{_runner_identity(os.getpid())}:{uuid.uuid4().hex}"
    with open(log_path, "ab", buffering=0) as log:
        orphans = end_orphans()
        if orphans:
            log.write(f"titanflow: ended processes {orphans} left running by a launch whose runner died\n".encode())
        output = _Output(log, tail_lines, on_lines)
        proc = subprocess.Popen(
            argv, env={**env, LAUNCH_ENV: launch_id}, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            # preexec_fn in a threaded process: safe for this one, see dies_with_this_thread
            start_new_session=True, preexec_fn=dies_with_this_thread(),  # noqa: PLW1509
        )
        readers = [threading.Thread(target=_drain, args=(s, output), daemon=True) for s in (proc.stdout, proc.stderr)]
        for reader in readers:
            reader.start()
        timed_out = threading.Event()
        tail_at_kill: list[str] = []

        def stop_job() -> None:
            tail_at_kill.extend(output.tail_now())  # what the job printed, not the launcher's own dying words
            # torchrun starts each rank in a process group of its own: reach them by ancestry and by mark
            stop_group(proc.pid, KILL_GRACE_S, others={*descendants(proc.pid), *launched(launch_id)})

        def on_timeout() -> None:
            timed_out.set()
            stop_job()

        watchdog = threading.Timer(timeout_s, on_timeout)
        watchdog.daemon = True
        watchdog.start()
        try:
            # exited but not reaped: its pid stays reserved, so its group id cannot name another group yet
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            watchdog.cancel()
            if timed_out.is_set():
                watchdog.join()  # its stop_job is under way: let it finish
            _end_leftovers(proc.pid, launch_id, readers)
            _, status, rusage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C or any error here: never leave the job running
            watchdog.cancel()
            stop_job()
            output.close()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        if timed_out.is_set():
            output.write(f"titanflow: killed after the {timeout_s:.0f} s timeout\n".encode())
        output.close()  # a reader still blocked on a pipe some process holds writes nothing more
    return ProcessResult(
        returncode=proc.returncode,
        wall_s=time.monotonic() - start,
        timed_out=timed_out.is_set(),
        peak_rss_bytes=rusage.ru_maxrss * 1024,
        tail=tail_at_kill if timed_out.is_set() else output.tail_now(),
    )


class _Output:
    """Where a launch's output goes, shared by the two pipe readers: the log file (every byte), and per line
    the tail and, through titanflow.launch.forward, the callback (at most :data:`LINE_BYTES` each). A log file that
    cannot be written (a full disk) loses the bytes from then on, never the tail or the callback, which are told
    how many bytes the log lacks and why when the launch ends (:meth:`close`)."""

    def __init__(self, log: BinaryIO, tail_lines: int, on_lines: Callable[[list[str]], None]):
        self._log = log
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._lock = threading.Lock()
        self._closed = False
        self._log_error: OSError | None = None
        self._unlogged_bytes = 0
        self._forwarder = LineForwarder(on_lines, note=lambda text: self.write(f"{text}\n".encode()))

    def write(self, *pieces: bytes) -> None:
        with self._lock:  # the pieces of one call reach the log together
            for piece in pieces:
                if not piece or self._closed:
                    continue
                if self._log_error is None:
                    try:
                        self._log.write(piece)
                        continue
                    except OSError as err:  # the rest of the output is not written after a gap
                        self._log_error = err
                self._unlogged_bytes += len(piece)

    def line(self, text: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._tail.append(text)
        self._forwarder.put(text)

    def tail_now(self) -> list[str]:
        with self._lock:
            return list(self._tail)

    def close(self) -> None:
        """Say what the log file lacks, if anything; let the callback take what is queued for it
        (titanflow.launch.forward.LineForwarder.close), then take no more output."""
        if self._log_error is not None:
            self.line(f"titanflow: {self._unlogged_bytes:,} bytes of this launch's output are not in "
                      f"{self._log.name}: {self._log_error}")
        self._forwarder.close()
        with self._lock:
            self._closed = True


def _drain(pipe: BinaryIO, output: _Output) -> None:
    """Read ``pipe`` to its end in pieces of :data:`READ_BYTES` (no line is ever held whole), then close it.

    The reader holds ``pipe`` until then, so its descriptor is never closed and reused under it."""
    fd = pipe.fileno()
    unlogged = bytearray()  # the current line's bytes not yet in the log (at most LOG_HOLD_BYTES)
    head = bytearray()  # the current line's first LINE_BYTES bytes: all the callback sees of it
    length = 0  # bytes of the current line so far
    while chunk := os.read(fd, READ_BYTES):
        end = chunk.rfind(b"\n") + 1
        if end:
            output.write(bytes(unlogged), chunk[:end])
            unlogged = bytearray(chunk[end:])
        else:
            unlogged += chunk
            if len(unlogged) > LOG_HOLD_BYTES:
                output.write(bytes(unlogged))
                unlogged.clear()
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            head += piece[:LINE_BYTES - len(head)]
            output.line(shown_line(bytes(head), length + len(piece)))
            head.clear()
            length = 0
        head += rest[:LINE_BYTES - len(head)]
        length += len(rest)
    if length:  # a last line without its newline
        output.write(bytes(unlogged), b"\n")
        output.line(shown_line(bytes(head), length))
    pipe.close()


def shown_line(head: bytes, length: int) -> str:
    """What the callback and the tail get of an output line of ``length`` bytes that starts with
    ``head``: the line decoded (invalid UTF-8 replaced, a trailing CR dropped), or, when it is longer
    than :data:`LINE_BYTES` bytes of UTF-8, its start and `` ... [N bytes cut]`` within that bound."""
    text = head.decode("utf-8", "replace").removesuffix("\r")
    if length <= LINE_BYTES and len(text.encode()) <= LINE_BYTES:
        return text
    room = LINE_BYTES - len(f" ... [{length} bytes cut]")  # the cut count has at most as many digits
    kept = text.encode()[:room].decode("utf-8", "ignore")  # "ignore": a character split by the cut
    return f"{kept} ... [{length - len(kept.encode())} bytes cut]"


def _end_leftovers(pgid: int, launch_id: str, readers: list[threading.Thread]) -> None:
    """Once the launched process (leader of group ``pgid``) has exited: give its output
    :data:`EXIT_GRACE_S` to end, then end its group and every process carrying ``launch_id``."""
    deadline = time.monotonic() + EXIT_GRACE_S
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    stop_group(pgid, LEFTOVER_GRACE_S, others=launched(launch_id))
    for reader in readers:  # the pipes close with the last process that held them
        reader.join(1.0)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def dies_with_this_thread() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when the calling thread dies (None off Linux).

    The standard library cannot do this: ``subprocess`` has no parent-death option and ``os`` has no
    ``prctl``, so Linux's ``prctl(PR_SET_PDEATHSIG)`` is called through ctypes in the child between
    fork and exec. The signal follows the death of the *thread* that forked (run_streaming's caller,
    which waits for the child, so it lives as long as the child does), and of the whole process on
    SIGKILL. The setting is not inherited by the child's own children: torchrun passes SIGTERM on to
    its ranks. A runner that died before the call is noticed by the parent pid having changed.

    ``preexec_fn`` is unsafe in a threaded parent when it takes a lock another thread held at fork;
    this one only makes system calls (``prctl`` through a function pointer resolved here, before the
    fork, so no ``dlsym`` runs in the child; ``getppid``; ``kill``), and CPython re-initialises its
    own locks in the child before calling it.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl, parent = _libc().prctl, os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _runner_identity(pid: int) -> str:
    """``<pid>:<start time>`` of a live process (the start time tells a reused pid apart), '' when gone."""
    try:
        return f"{pid}:{psutil.Process(pid).create_time():.2f}"
    except psutil.NoSuchProcess:
        return ""


def _marked() -> list[tuple[int, str]]:
    """(pid, :data:`LAUNCH_ENV` value) of every readable process other than this one that carries it."""
    found = []
    for proc in psutil.process_iter(["environ"]):
        mark = (proc.info["environ"] or {}).get(LAUNCH_ENV)
        if mark and proc.pid != os.getpid():
            found.append((proc.pid, mark))
    return found


def launched(launch_id: str) -> list[int]:
    """PIDs of the running processes of the launch ``launch_id``: each inherited :data:`LAUNCH_ENV`
    from it, whatever its parent, process group or session now (an orphan of a crashed launcher too)."""
    return [pid for pid, mark in _marked() if mark == launch_id]


def end_orphans() -> list[int]:
    """End the processes of launches whose runner is gone (a flow process killed with SIGKILL leaves
    a rank of a crashed torchrun, or a descendant in a session of its own, running) and return their PIDs.

    A process counts when its :data:`LAUNCH_ENV` names a runner pid that no longer runs with the
    recorded start time; launches of live runners, in this process or another, are left alone.
    Each gets SIGTERM, then SIGKILL after :data:`KILL_GRACE_S`.
    """
    orphans = [pid for pid, mark in _marked() if not _runner_lives(mark)]
    if orphans:  # killpg of the first reaches a group only if it leads one (a rank in a session of its own)
        stop_group(orphans[0], KILL_GRACE_S, others=orphans[1:])
    return orphans


def _runner_lives(mark: str) -> bool:
    """Whether the runner a :data:`LAUNCH_ENV` value names still runs (True for a value not in that form)."""
    runner, _, _ = mark.rpartition(":")
    pid = runner.split(":")[0]
    return not pid.isdigit() or _runner_identity(int(pid)) == runner


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


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def descendants(pid: int) -> list[int]:
    """PIDs of every process ``pid`` started, at any depth, whatever process group or session it is in
    ([] when ``pid`` is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group_members(pgid: int) -> list[int]:
    """PIDs of the processes in process group ``pgid`` (its leader included, even a zombie one)."""
    return [pid for pid in psutil.pids() if _group_of(pid) == pgid]


def stop_group(pid: int, grace_s: float, others: Iterable[int] = ()) -> None:
    """Stop the process group led by ``pid``, and the processes ``others`` (descendants that left
    the group, e.g. in sessions of their own): SIGTERM to all, then SIGKILL to whatever still runs
    after ``grace_s`` seconds (then waits up to :data:`KILL_WAIT_S` for them). The group's members
    are waited for like ``others``, so one that outlives its leader still gets SIGKILL. A zombie counts
    as stopped; nothing is reaped here (the parent's wait does that), so a caller blocked in ``wait4``
    on ``pid`` keeps its rusage."""
    others = [p for p in {*group_members(pid), *others} if p != pid]
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
    while True:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``, field 22), or None where that
    cannot be read (no such process, not Linux). Unlike psutil's ``create_time`` (those ticks plus the boot time the
    kernel derives from the wall clock, which moves when the clock is set), it never changes for one process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])  # fields after "(comm)" start at field 3
    except (OSError, ValueError, IndexError):
        return None


def alive(proc) -> psutil.Process | None:
    """The recorded process (anything with ``pid`` and ``create_time``, psutil's start time, and optionally
    ``start_ticks``, :func:`start_ticks`'s) if it still runs (same PID and start), else None. The start is told by its
    ticks where both are known: a wall clock set since (measured: a server recorded at the start of a test session no
    longer matched its ``create_time`` within 0.5 s by its end, so it was never stopped), else by ``create_time``."""
    try:
        found = psutil.Process(proc.pid)
        recorded = getattr(proc, "start_ticks", None)
        same = (recorded == start_ticks(proc.pid) if recorded is not None
                else abs(found.create_time() - proc.create_time) < 0.5)
        if same and found.status() != psutil.STATUS_ZOMBIE:
            return found
    except psutil.NoSuchProcess:
        pass
    return None
