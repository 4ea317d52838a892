"""run_streaming: live lines, no pipe deadlock, the whole process group killed on timeout."""

import os
import sys
import textwrap

from titanflow.launch.process import run_streaming, wait_gone


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_lines_stream_to_callback_and_log_from_both_pipes(tmp_path):
    seen = []
    result = run_streaming(_python("""
        import sys
        for i in range(20000):  # ~400 KB on each pipe: more than a pipe buffer holds
            print(f"out {i}", flush=False); print(f"err {i}", file=sys.stderr)
    """), env=dict(os.environ), log_path=tmp_path / "log", timeout_s=60, on_line=seen.append)
    assert result.returncode == 0 and not result.timed_out
    assert len(seen) == 40000 and "out 19999" in seen and "err 19999" in seen
    assert (tmp_path / "log").read_text().count("\n") == 40000
    assert result.peak_rss_bytes > 1_000_000  # a Python interpreter is several MB


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
