"""titan_cfg.forked_torchrun: torchrun's report of forked ranks lists every rank that had failed when it looked
(torch 2.13 lists one), so that the root cause (titanflow.launch.root_cause) can name the rank killed, not the peer
that lost it. The ranks here are real forks under torch's own MultiprocessContext, as torchrun starts them."""

import os
import signal
import time

import psutil
import pytest

from titan_cfg.forked_torchrun import report_every_failure


def _rank(local_rank: int) -> None:
    """Rank 1 is killed (SIGKILL); rank 0 raises what gloo raises once its peer is gone, 50 ms later."""
    if local_rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:5537.")


def _failures(tmp_path, monkeypatch) -> dict:
    """Start the two ranks forked, wait until both have ended, then let torch's context poll once: its failures.
    torch's start_processes gives each rank an error file in tempfile.gettempdir(), which a rank that raises writes and
    nothing removes: here under ``tmp_path``, as a launch's are under its TMPDIR (titanflow.launch.render)."""
    import tempfile

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes

    tmp_path.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = start_processes("rank", _rank, args={0: (0,), 1: (1,)}, envs={0: {}, 1: {}},
                              logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)), start_method="fork")
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
              for pid in context.pids().values()):
        assert time.monotonic() < deadline, "the ranks did not end"
        time.sleep(0.02)
    result = context.wait(timeout=5)
    context.close()
    assert not [pid for pid in context.pids().values() if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # nothing of the launch is left
    return result.failures


def test_every_rank_that_had_failed_is_reported_the_killed_one_with_its_signal(tmp_path, monkeypatch):
    from torch.distributed.elastic.multiprocessing import api

    upstream = api.MultiprocessContext._poll
    try:
        # torch 2.13: one of the two, whichever join met first
        assert len(_failures(tmp_path / "upstream", monkeypatch)) == 1
        assert report_every_failure() and not report_every_failure()  # patched once
        failures = _failures(tmp_path / "patched", monkeypatch)
    finally:
        api.MultiprocessContext._poll = upstream
    assert sorted(failures) == [0, 1]
    assert failures[1].exitcode == -signal.SIGKILL and failures[1].message.startswith("Signal 9 (SIGKILL)")
    assert failures[0].exitcode == 1


_SIGTERM_A_FORKED_RANK = """
import os, signal, sys, tempfile, time
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes
from titan_cfg import forked_torchrun

def rank(restore):
    if restore:
        forked_torchrun.restore_startup_handlers()
    time.sleep(60)

forked_torchrun.record_startup_handlers()
context = start_processes("rank", rank, args={0: (sys.argv[1] == "restore",)}, envs={0: {}},
                          logs_specs=DefaultLogsSpecs(log_dir=tempfile.mkdtemp()), start_method="fork")
time.sleep(1)  # torchrun's own handlers are in place once start_processes returns; the rank is asleep
os.kill(context.pids()[0], signal.SIGTERM)
print(context.wait(timeout=30).failures[0].exitcode)
"""


@pytest.mark.torchrun
@pytest.mark.parametrize("mode, exitcode", [("restore", -signal.SIGTERM), ("inherit", 1)])
def test_a_forked_rank_ends_on_sigterm_as_a_new_python_does(mode, exitcode, tmp_path):
    """torchrun's agent handles SIGTERM itself (raising an exception, run between bytecodes) before it forks: a rank
    that keeps that handler exits 1 through Python, and one blocked in a collective does not exit at all (met in
    make test: 30 s until the launch timeout). With the handlers the launcher started with restored, SIGTERM ends the
    rank at once, by the signal (exit code -15), as it ends a rank torchrun started afresh."""
    import subprocess
    import sys

    # its log folder and error files in tmp_path, not left in /tmp
    done = subprocess.run([sys.executable, "-c", _SIGTERM_A_FORKED_RANK, mode], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == exitcode


#: torchrun's main replaced by a report of what the importable module recorded (and the job's preparation, which needs
#: a job file, by nothing), then the module run as ``python -m`` runs it.
_RUN_AS_MAIN = """
import runpy, sys
import torch.distributed.run
import titan_cfg.entry
titan_cfg.entry.prepare = lambda: None
torch.distributed.run.main = lambda argv: print(len(sys.modules["titan_cfg.forked_torchrun"].startup_handlers))
sys.argv = ["forked_torchrun"]
runpy.run_module("titan_cfg.forked_torchrun", run_name="__main__", alter_sys=True)
"""


@pytest.mark.torchrun
def test_run_as_a_module_it_records_the_handlers_where_forked_rank_restores_them():
    """``python -m titan_cfg.forked_torchrun`` runs the file as __main__; forked_rank.py imports
    titan_cfg.forked_torchrun, a second copy, unless the launcher's handlers are recorded there: all four of
    AGENT_SIGNALS (SIGTERM, SIGINT, SIGHUP, SIGQUIT exist on Linux)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _RUN_AS_MAIN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == 4
