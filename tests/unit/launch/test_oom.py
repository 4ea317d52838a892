"""titanflow.launch.oom: a SIGKILLed rank told apart as an out-of-memory kill, from the kernel's own record or the
memory cgroup's count; a real process in a memory cgroup of 64 MiB, killed by the kernel, read back both ways."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.memory_cgroup import limited_cgroup

from titanflow.launch import oom

#: dmesg's lines for a process killed in a memory cgroup of 200 MiB on this machine (the kill's summary line, and an
#: earlier record of another pid).
KERNEL_LOG = """\
[12000.000001] Memory cgroup out of memory: Killed process 7968 (python3) total-vm:1kB, anon-rss:1024kB, file-rss:0kB
[12636.707324] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=python3,pid=7968,uid=0
[12636.707347] Memory cgroup out of memory: Killed process 7968 (python3) total-vm:426168kB, anon-rss:204288kB, \
file-rss:6520kB, shmem-rss:0kB, UID:0 pgtables:468kB oom_score_adj:0
"""

KILLED = "Signal 9 (SIGKILL) received by PID 7968"


def test_the_kernels_record_of_the_pid_after_the_launch_started_names_the_kill():
    # the record after the launch's start, not the earlier one of a reused pid
    assert oom.kernel_kill(7968, 12600.0, KERNEL_LOG) == 204288 * 1024
    assert oom.kernel_kill(7968, 12700.0, KERNEL_LOG) is None
    assert oom.kernel_kill(7969, 0.0, KERNEL_LOG) is None
    message = oom.explain(KILLED, oom.LaunchMark(12600.0, None), log=KERNEL_LOG, kills_now=None)
    assert message == (f"{KILLED}: killed by the kernel's out-of-memory killer at a resident set of 0.19 GiB (the "
                       f"kernel's log); {oom.FIX}")


def test_without_the_kernels_log_the_cgroups_count_tells_it_with_the_launchs_largest_resident_set():
    since = oom.LaunchMark(12600.0, cgroup_oom_kills=2)
    message = oom.explain(KILLED, since, 3 * 2**29, log="", kills_now=3)
    assert message == (f"{KILLED}: killed by the kernel's out-of-memory killer (the memory cgroup counted 1 "
                       f"out-of-memory kill(s) during the launch; the launch's largest resident set 1.50 GiB); {oom.FIX}")
    # no new kill, or no count to compare: a SIGKILL of no known cause, said as it was
    assert oom.explain(KILLED, since, log="", kills_now=2) == KILLED
    assert oom.explain(KILLED, oom.LaunchMark(0.0, None), log="", kills_now=5) == KILLED
    assert oom.explain("ValueError: bad batch", since, log=KERNEL_LOG, kills_now=9) == "ValueError: bad batch"


@pytest.mark.parametrize("name, text", [("memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n"),
                                        ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")])
def test_the_cgroup_count_is_read_from_v2_and_v1(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert oom.cgroup_oom_kills(tmp_path) == 2
    (tmp_path / name).write_text("nothing of the kind\n")
    assert oom.cgroup_oom_kills(tmp_path) is None


@pytest.mark.fault
def test_a_process_over_its_cgroups_limit_is_found_killed_both_ways():
    """A Python that allocates 256 MiB in a cgroup of 64 MiB: the kernel kills it (exit -9); its cgroup counts one
    kill, and the kernel's log names its pid with the resident set it had (about the limit)."""
    since = oom.mark()
    with limited_cgroup(64 * 2**20) as folder:
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); "
                                  "x = bytearray(256 * 2**20)"], stdin=subprocess.PIPE, text=True)
        (folder / "cgroup.procs").write_text(str(child.pid))
        child.communicate("go\n", timeout=60)
        assert child.returncode == -9
        assert oom.cgroup_oom_kills(folder) == 1
    log = oom.kernel_log()
    if log is None:
        pytest.fail("dmesg is not readable here: the kernel's record cannot be checked (kernel.dmesg_restrict?)")
    rss = oom.kernel_kill(child.pid, since.uptime_s, log)
    assert rss is not None and 32 * 2**20 < rss < 128 * 2**20  # about the limit (67.4 MiB measured), far below 256
    message = oom.explain(f"Signal 9 (SIGKILL) received by PID {child.pid}", since, log=log)
    assert "killed by the kernel's out-of-memory killer at a resident set of" in message
