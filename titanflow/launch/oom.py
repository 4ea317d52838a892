"""Whether a rank that died of SIGKILL was ended by the kernel's out-of-memory killer.

torchrun reports a killed rank as ``Signal 9 (SIGKILL) received by PID <pid>``, whoever sent the signal. Two records
tell an out-of-memory kill apart, read after the launch, each only where this machine lets it be read:

- the kernel's own log (``dmesg``): ``Killed process <pid> (<name>) total-vm:..., anon-rss:<kB>, ...`` (or ``Memory
  cgroup out of memory: Killed process ...``), after the launch started (its ``[uptime]`` stamp): names the very
  process and its resident set when it was killed. Not readable where ``kernel.dmesg_restrict`` forbids it, and a
  container in a pid namespace of its own sees other pids than the kernel's;
- the memory cgroup this process runs in: its ``oom_kill`` count (cgroup v2 ``memory.events``, v1
  ``memory.oom_control``) rose during the launch. It names no process: the launch's largest resident set is given.

:func:`explain` adds what was found to the root cause (titanflow.launch.torchrun.launch_error), in words the failure
classifier reads as ``out_of_memory`` (titanflow.judge.failures): a retry of the same job on the same machine meets
the same limit, so it is not retried, and the message says what to change.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: torchrun's line for a rank killed by a signal.
SIGKILLED = re.compile(r"Signal 9 \(SIGKILL\) received by PID (\d+)")
#: The kernel's line for a process its out-of-memory killer ended (mm/oom_kill.c: ``__oom_kill_process``).
KERNEL_KILL = re.compile(r"^\[\s*(?P<uptime>\d+\.\d+)\][^\n]*?Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
                         r"[^\n]*?anon-rss:(?P<anon_kb>\d+)kB", re.MULTILINE)

#: What to change, said with every out-of-memory kill.
FIX = ("fix: a smaller --global-batch-size or --seq-len, or more ranks to shard the model over (--nproc-per-node, "
       "--nnodes); the same job on the same machine meets the same limit")

#: The cgroup file system.
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class LaunchMark:
    """What was true when a launch started: the machine's uptime (s, the kernel log's clock) and the memory
    cgroup's out-of-memory kill count (None: unreadable)."""

    uptime_s: float
    cgroup_oom_kills: int | None


def uptime_s() -> float:
    """Seconds since boot (``/proc/uptime``), the clock of the kernel log's stamps; 0.0 where it cannot be read
    (then any kill the kernel's log records counts as after the launch's start)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def memory_cgroup() -> Path | None:
    """This process's memory cgroup folder: cgroup v2's unified one, else v1's ``memory`` controller; None when
    neither is readable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:  # "<id>:<controllers>:<path>"
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            folder = CGROUP_ROOT / "memory" / path.lstrip("/")
            return folder if folder.is_dir() else None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            folder = CGROUP_ROOT / path.lstrip("/")
            return folder if (folder / "memory.events").is_file() else None
    return None


def cgroup_oom_kills(folder: Path | None = None) -> int | None:
    """The ``oom_kill`` count of the memory cgroup ``folder`` (default :func:`memory_cgroup`): v2 ``memory.events``,
    v1 ``memory.oom_control``; None when unreadable."""
    folder = folder or memory_cgroup()
    if folder is None:
        return None
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (folder / name).read_text()
        except OSError:
            continue
        found = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if found:
            return int(found.group(1))
    return None


def mark() -> LaunchMark:
    """The :class:`LaunchMark` of a launch starting now."""
    return LaunchMark(uptime_s=uptime_s(), cgroup_oom_kills=cgroup_oom_kills())


def kernel_log() -> str | None:
    """The kernel's ring buffer (``dmesg``), or None where it cannot be read."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def kernel_kill(pid: int, since_uptime_s: float, log: str | None) -> int | None:
    """The resident set (bytes: the kernel's anon-rss) at which the out-of-memory killer ended process ``pid`` after
    ``since_uptime_s``, from the kernel log text ``log``; None when it did not (or ``log`` is None)."""
    for found in KERNEL_KILL.finditer(log or ""):
        if int(found.group("pid")) == pid and float(found.group("uptime")) >= since_uptime_s:
            return int(found.group("anon_kb")) * 1024
    return None


def explain(message: str, since: LaunchMark, peak_rss_bytes: int | None = None, *, log: str | None = None,
            kills_now: int | None = None) -> str:
    """``message`` (a rank's root cause), with the out-of-memory kill that explains it when it is a SIGKILL and a
    record says so (module docstring); else ``message`` unchanged. ``log`` and ``kills_now`` default to the kernel
    log and the cgroup's count read now; ``peak_rss_bytes``: the launch's largest resident set, said when only the
    cgroup's count tells the kill."""
    killed = SIGKILLED.search(message)
    if killed is None:
        return message
    pid = int(killed.group(1))
    rss = kernel_kill(pid, since.uptime_s, log if log is not None else kernel_log())
    if rss is not None:
        return (f"{message}: killed by the kernel's out-of-memory killer at a resident set of {rss / 2**30:.2f} GiB "
                f"(the kernel's log); {FIX}")
    now = kills_now if kills_now is not None else cgroup_oom_kills()
    if since.cgroup_oom_kills is not None and now is not None and now > since.cgroup_oom_kills:
        largest = f"; the launch's largest resident set {peak_rss_bytes / 2**30:.2f} GiB" if peak_rss_bytes else ""
        return (f"{message}: killed by the kernel's out-of-memory killer (the memory cgroup counted "
                f"{now - since.cgroup_oom_kills} out-of-memory kill(s) during the launch{largest}); {FIX}")
    return message
