"""run_streaming: live lines, no pipe deadlock, the whole process group killed on timeout; output
bounded in memory per line, a bounded wait after the launched process exits, nothing outliving a
killed runner."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import psutil
import pytest

from titanflow.launch.forward import DRAIN_S, QUEUE_LINES, STALL_S
from titanflow.launch.process import (
    EXIT_GRACE_S,
    LEFTOVER_GRACE_S,
    LINE_BYTES,
    run_streaming,
    shown_line,
    wait_gone,
)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_lines_stream_to_callback_and_log_from_both_pipes(tmp_path):
    seen = []
    result = run_streaming(_python("""
        import sys
        for i in range(20000):  # ~400 KB on each pipe: more than a pipe buffer holds
            print(f"out {i}", flush=False); print(f"err {i}", file=sys.stderr)
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=60, on_lines=seen.extend)
    assert result.returncode == 0 and not result.timed_out
    assert len(seen) == 40000 and "out 19999" in seen and "err 19999" in seen
    assert (tmp_path / "log").read_text().count("\n") == 40000
    assert result.peak_rss_bytes > 1_000_000  # a Python interpreter is several MB


@pytest.mark.fault
def test_a_blocked_callback_holds_up_neither_the_log_nor_the_launch(tmp_path):
    """The callback blocks on its first batch (a Prefect API call while the server is down): the log still gets
    every line, the callback's queue fills and, once the call has lasted STALL_S, the rest skip it; the
    call returns DRAIN_S after the launch ended, saying both in the log."""
    release = threading.Event()
    seen = []

    def blocked(lines: list[str]) -> None:
        seen.extend(lines)
        release.wait(600)

    lines = QUEUE_LINES + 5000
    t0 = time.monotonic()
    result = run_streaming(_python(f"""
        for i in range({lines}):
            print(f"line {{i}}")
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=60, on_lines=blocked)
    wall_s = time.monotonic() - t0
    release.set()
    assert result.returncode == 0 and result.tail[-1] == f"line {lines - 1}"
    log = (tmp_path / "log").read_text().splitlines()
    assert log[:lines] == [f"line {i}" for i in range(lines)]
    # the blocked batch (the lines queued when the call began) left the queue first: it holds QUEUE_LINES after it
    assert seen == [f"line {i}" for i in range(len(seen))] and 1 <= len(seen) <= 1000
    assert f"titanflow: {lines - len(seen) - QUEUE_LINES} output lines skipped the run log" in log[-1]
    assert "the output callback was still busy" in log[-2]
    assert DRAIN_S <= wall_s < STALL_S + DRAIN_S + 30


def test_a_callback_that_raises_is_noted_once_and_the_launch_goes_on(tmp_path):
    def failing(lines: list[str]) -> None:
        raise ConnectionError("the Prefect API is not answering")

    result = run_streaming(_python("""
        for i in range(100):
            print(f"line {i}")
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=60, on_lines=failing)
    log = (tmp_path / "log").read_text()
    assert result.returncode == 0 and log.count("line ") == 100
    assert log.count("titanflow: the output callback failed, the launch goes on: ConnectionError: the Prefect "
                     "API is not answering") == 1


@pytest.mark.fault
def test_timeout_kills_the_whole_group_and_keeps_the_log(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    result = run_streaming(_python(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=3)
    assert result.timed_out and result.returncode != 0
    assert result.wall_s < 30
    assert wait_gone(int(pid_file.read_text()), 10.0)  # signalled processes take a moment to die
    log = (tmp_path / "log").read_text()
    assert "started" in log and "killed after the 3 s timeout" in log


def test_nonzero_exit_keeps_the_tail(tmp_path):
    result = run_streaming(_python("print('last words'); raise SystemExit(3)"), env=dict(os.environ),
                           log_path=tmp_path / "log", timeout_s=60)
    assert result.returncode == 3 and result.tail[-1] == "last words"


@pytest.mark.fault
def test_ctrl_c_stops_the_group_before_propagating(tmp_path):
    import signal
    import threading

    import pytest

    pid_file = tmp_path / "child.pid"
    threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        run_streaming(_python(f"""
            import os, time
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
        """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=600)
    assert wait_gone(int(pid_file.read_text()), 10.0)  # signalled processes take a moment to die


@pytest.mark.fault
def test_timeout_ends_a_stopped_descendant_in_a_group_of_its_own(tmp_path):
    """As torchrun starts a rank: a child in a session of its own, here stopped (SIGSTOP, a hung rank),
    holding the output pipe. The timeout ends it too, and the runner returns within the kill grace."""
    from titanflow.launch.process import KILL_GRACE_S

    pid_file = tmp_path / "rank.pid"
    result = run_streaming(_python(f"""
        import subprocess, sys, time
        rank = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"],
                                start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(rank.pid))
        print("started", flush=True)
        time.sleep(600)
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=3)
    assert result.timed_out
    assert wait_gone(int(pid_file.read_text()), 5.0)
    assert result.wall_s < 3 + KILL_GRACE_S + 5  # not the 30 s per pipe reader a survivor would cost


BIG_LINE_BYTES = 50_000_000


@pytest.mark.fault
def test_a_50_MB_line_is_logged_whole_but_reaches_callback_tail_and_memory_cut(tmp_path):
    """The log keeps all 50 MB; the callback and tail get LINE_BYTES of it; the runner's Python heap
    grows by well under 10 MB. Held per pipe: one READ_BYTES read, at most LOG_HOLD_BYTES (256 KiB) of
    the line not yet written, its first LINE_BYTES; the old reader held the line whole as text,
    several times over (the line, its rstrip copy, line + newline): 150 MB and more."""
    seen = []
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = run_streaming(_python(f"""
            import sys
            print("before", flush=True)
            print("err line", file=sys.stderr, flush=True)
            sys.stdout.buffer.write(b"x" * {BIG_LINE_BYTES})  # no newline, then exit
        """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=120, on_lines=seen.extend)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"traced peak {peak / 1e6:.2f} MB")  # measured: about 1 MB
    assert result.returncode == 0
    assert peak < 10_000_000
    log = tmp_path / "log"
    assert log.stat().st_size == len("before\n") + len("err line\n") + BIG_LINE_BYTES + 1  # +1: the closing newline
    assert log.read_bytes().count(b"x") == BIG_LINE_BYTES
    assert "before" in seen and "err line" in seen and len(seen) == 3
    assert all(len(line.encode()) <= LINE_BYTES for line in seen)
    room = LINE_BYTES - len(f" ... [{BIG_LINE_BYTES} bytes cut]")  # shown_line's rule
    assert result.tail[-1] == seen[-1] == "x" * room + f" ... [{BIG_LINE_BYTES - room} bytes cut]"
    assert len(seen[-1].encode()) == LINE_BYTES  # 8-digit counts on both sides: exactly the bound


def test_a_shown_line_is_cut_within_the_bound_and_says_how_much_was_cut():
    assert shown_line(b"step: 1 loss: 11.9\r", 19) == "step: 1 loss: 11.9"  # CR of a CRLF line dropped
    assert shown_line(b"a\xffb", 3) == "a\ufffdb"  # invalid UTF-8 replaced, as a text pipe did
    # 2000 two-byte characters (4000 bytes) and more of them not read: the cut falls inside one
    head = "é".encode() * 2048  # LINE_BYTES bytes, all the reader keeps of the line
    cut = shown_line(head, 10_000)
    room = LINE_BYTES - len(" ... [10000 bytes cut]")  # 4074: an odd byte count splits an é
    assert cut == "é" * (room // 2) + f" ... [{10_000 - 2 * (room // 2)} bytes cut]"
    assert len(cut.encode()) <= LINE_BYTES


def _spawner(holds_pipe: bool, own_session: bool) -> list[str]:
    """A launched process that starts a ``sleep 60`` grandchild and exits at once, printing its pid."""
    return _python(f"""
        import subprocess
        quiet = {{}} if {holds_pipe} else dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        grandchild = subprocess.Popen(["sleep", "60"], start_new_session={own_session}, **quiet)
        print(grandchild.pid, flush=True)
    """)


@pytest.mark.fault
@pytest.mark.parametrize("own_session", [False, True], ids=["same group", "own session"])
def test_a_grandchild_holding_the_pipe_costs_the_exit_grace_then_is_ended(tmp_path, own_session):
    """The runner waits EXIT_GRACE_S for the pipes to close, then ends the group and the launch's marked
    processes (one in a session of its own too); the grandchild dies on SIGTERM at once."""
    result = run_streaming(_spawner(holds_pipe=True, own_session=own_session), env=dict(os.environ),
                           log_path=tmp_path / "log", timeout_s=60)
    grandchild = int(result.tail[0])
    assert result.returncode == 0 and not result.timed_out
    assert EXIT_GRACE_S <= result.wall_s < EXIT_GRACE_S + LEFTOVER_GRACE_S  # before: 45 s, and it ran on
    assert wait_gone(grandchild, 0)


@pytest.mark.fault
def test_a_grandchild_that_closed_the_pipe_is_ended_without_waiting(tmp_path):
    result = run_streaming(_spawner(holds_pipe=False, own_session=True), env=dict(os.environ),
                           log_path=tmp_path / "log", timeout_s=60)
    assert result.returncode == 0
    assert result.wall_s < EXIT_GRACE_S  # the pipes closed with the launched process
    assert wait_gone(int(result.tail[0]), 0)


RUNNER = """
import os, sys
from pathlib import Path
from titanflow.launch.process import run_streaming
run_streaming(sys.argv[2:], env=dict(os.environ), log_path=Path(sys.argv[1]), timeout_s=600)
"""


def _start_runner(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    """A flow-like process: a Python process calling run_streaming on ``argv``, logging to a file."""
    script, log = tmp_path / "runner.py", tmp_path / "runner.log"
    script.write_text(RUNNER)
    return subprocess.Popen([sys.executable, str(script), str(log), *argv]), log


def _wait_for_lines(log: Path, count: int, seconds: float) -> list[str]:
    """The launched program's first ``count`` lines of ``log``. Lines the launch itself wrote are skipped: a launch
    that ended what an earlier killed runner left (the other test worker's, make test runs two) says so first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        lines = [line for line in text.splitlines() if not line.startswith("titanflow: ")]
        if len(lines) >= count:
            return lines
        time.sleep(0.2)
    raise AssertionError(f"{log} has fewer than {count} lines after {seconds} s: {log.read_text()!r}")


def _kill_runner(runner: subprocess.Popen) -> None:
    runner.send_signal(signal.SIGKILL)
    runner.wait()


def _end(pids) -> None:
    """Clean up after a failing test: end what it started that still runs."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.fault
def test_the_launched_process_dies_with_a_runner_killed_by_sigkill(tmp_path):
    runner, log = _start_runner(tmp_path, _python("import os, time; print(os.getpid(), flush=True); time.sleep(600)"))
    child = int(_wait_for_lines(log, 1, 60)[0])
    try:
        _kill_runner(runner)
        assert wait_gone(child, 5.0)  # PR_SET_PDEATHSIG: SIGTERM as the runner dies
    finally:
        _end([child])


@pytest.mark.fault
def test_the_next_launch_ends_what_a_killed_runner_left_in_a_session_of_its_own(tmp_path):
    """The launched process dies with its runner, but its child in a session of its own (as a rank of a
    torchrun that was itself SIGKILLed) is nobody's to end: the next launch finds it by its mark."""
    runner, log = _start_runner(tmp_path, _python("""
        import subprocess, sys, time
        orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(orphan.pid, flush=True)
        time.sleep(600)
    """))
    orphan = int(_wait_for_lines(log, 1, 60)[0])
    try:
        _kill_runner(runner)
        # The case: it outlives its runner and its parent. Any launch on this host ends it, a launch of the other
        # test worker (make test runs two) as well, even in the moment after the kill: then it is gone before ours
        # starts, and ours has nothing of it to name.
        ended_elsewhere = wait_gone(orphan, 1.0)
        result = run_streaming(["true"], env=dict(os.environ), log_path=tmp_path / "next.log", timeout_s=60)
        assert result.returncode == 0
        assert wait_gone(orphan, 0)
        if not ended_elsewhere:
            said = (tmp_path / "next.log").read_text().splitlines()[0]  # others' orphans may be named too
            assert said.startswith("titanflow: ended processes [") and \
                f" {orphan}," in said.replace("[", " ").replace("]", ",")
    finally:
        _end([orphan])


#: Seconds torchrun and its ranks get to end after the runner's SIGKILL (measured: under 1 s on 2 CPU
#: cores; torchrun's SIGTERM handler sends SIGTERM to every rank and waits for them).
TORCHRUN_STOP_S = 15.0


@pytest.mark.fault
def test_torchrun_and_its_ranks_die_with_a_runner_killed_by_sigkill(tmp_path):
    sleeper = tmp_path / "sleeper.py"
    # each rank names itself in a file of its own: two ranks printing at once interleave on the shared pipe
    sleeper.write_text(f"import os, time\nfrom pathlib import Path\nPath({str(tmp_path)!r}, 'rank' + os.environ['RANK'])"
                       ".write_text(str(os.getpid()))\ntime.sleep(600)\n")
    torchrun = str(Path(sys.executable).parent / "torchrun")
    runner, _ = _start_runner(tmp_path, [torchrun, "--standalone", "--nproc_per_node=2", "--log-dir",
                                         str(tmp_path / "ranks"), str(sleeper)])  # its logs here, not in /tmp
    deadline = time.monotonic() + 120
    found = []
    while len(found) < 2 and time.monotonic() < deadline:
        found = [f for f in (tmp_path / "rank0", tmp_path / "rank1") if f.is_file() and f.read_text()]
        time.sleep(0.2)
    ranks = [int(f.read_text()) for f in found]
    launcher = [p.pid for p in psutil.Process(runner.pid).children()]
    assert len(ranks) == 2 and len(launcher) == 1, (ranks, launcher)
    assert all(os.getpgid(rank) == rank for rank in ranks)  # torchrun puts each rank in a group of its own
    try:
        _kill_runner(runner)
        started = time.monotonic()
        assert all(wait_gone(pid, TORCHRUN_STOP_S) for pid in [*launcher, *ranks])
        print(f"torchrun and both ranks gone {time.monotonic() - started:.1f} s after the runner's SIGKILL")
    finally:
        _end([*launcher, *ranks])


def test_a_recorded_process_is_told_by_its_start_ticks_whatever_the_wall_clock_did():
    """A server recorded at a session's start no longer matched psutil's create_time within 0.5 s at its end (the boot
    time psutil adds comes from the wall clock): recorded with its start ticks, a process is found by those alone; a
    PID another process took (other ticks) is not; a record without ticks falls back to create_time."""
    import os
    import types

    import psutil

    from titanflow.launch.process import alive, start_ticks

    me = psutil.Process()
    ticks = start_ticks(os.getpid())
    assert isinstance(ticks, int) and ticks > 0
    moved_clock = types.SimpleNamespace(pid=os.getpid(), create_time=me.create_time() + 5.0, start_ticks=ticks)
    assert alive(moved_clock) is not None
    assert alive(types.SimpleNamespace(pid=os.getpid(), create_time=me.create_time(), start_ticks=ticks + 1)) is None
    assert alive(types.SimpleNamespace(pid=os.getpid(), create_time=me.create_time())) is not None  # an old record
    assert alive(types.SimpleNamespace(pid=os.getpid(), create_time=me.create_time() + 5.0)) is None
