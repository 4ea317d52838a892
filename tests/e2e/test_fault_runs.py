"""Faults injected into real runs: a rank that hangs, a rank killed mid-run, Ctrl-C of the command line.

Each asserts how the run ends (verdict, class or cancel), how often training ran, that no process of
the run is left, and that its logs and the history rows already there are intact.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import FIXTURES
from helpers.run_processes import (
    changed_history_cells,
    logged_steps,
    rank_process,
    run_processes,
    train_run_count,
    wait_until,
)

from titanflow.launch.process import KILL_GRACE_S, KILL_WAIT_S

pytestmark = [pytest.mark.e2e, pytest.mark.fault]

#: The launch timeout of the hung run (s): long enough for a launch to log its first step on two busy cores
#: (20-40 s measured), and for the last launch to train its 3 steps.
HANG_TIMEOUT_S = 90
#: After the timeout the watchdog sends SIGTERM (and SIGCONT, for a stopped rank), SIGKILL after KILL_GRACE_S,
#: then waits KILL_WAIT_S: every process of the launch is gone this long after the launch started.
HANG_GONE_S = HANG_TIMEOUT_S + KILL_GRACE_S + KILL_WAIT_S


class FaultInjector(threading.Thread):
    """Beside a running flow: stops rank 1 of the first launch after its first step (a hang), then kills
    rank 1 of the second launch after its first step; records what it saw in ``seen``."""

    def __init__(self, run_dir: Path):
        super().__init__(daemon=True)
        self.run_dir, self.seen, self.error = run_dir, {}, None

    def run(self) -> None:
        try:
            self._inject()
        except Exception as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def _first_step_of_next_launch(self, steps_before: int) -> psutil.Process:
        log = self.run_dir / "train.log"
        wait_until(lambda: len(logged_steps(log)) > steps_before, 300, "a launch's first step")
        rank = rank_process(self.run_dir, 1)
        assert rank is not None, "rank 1 is not running after its first step"
        return rank

    def _inject(self) -> None:
        rank = self._first_step_of_next_launch(0)
        launch_started = min(p.create_time() for p in run_processes(self.run_dir))
        rank.suspend()  # SIGSTOP: the rank hangs; torchrun started it in a process group of its own
        self.seen["stopped_pid"] = rank.pid
        wait_until(lambda: not run_processes(self.run_dir), HANG_GONE_S + 60, "the hung launch's end")
        self.seen["hang_gone_s"] = time.time() - launch_started
        rank = self._first_step_of_next_launch(len(logged_steps(self.run_dir / "train.log")))
        rank.kill()  # SIGKILL, mid-run
        killed = time.time()
        self.seen["killed_pid"] = rank.pid
        wait_until(lambda: not run_processes(self.run_dir), 60, "the launch with a killed rank's end")
        self.seen["kill_gone_s"] = time.time() - killed


def _flow_run_logs(flow_run_id) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    messages: list[str] = []
    with get_client(sync_client=True) as client:
        while True:  # every page: the ranks' output makes thousands of lines
            page = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200,
                                    offset=len(messages))
            messages += [log.message for log in page]
            if len(page) < 200:
                return "\n".join(messages)


def test_a_hung_rank_then_a_killed_rank_are_ended_retried_and_the_third_launch_passes(tmp_path):
    """Launch 1: rank 1 SIGSTOPped after step 1, so the launch hangs until its HANG_TIMEOUT_S timeout; every
    process of it (the stopped rank in its own group included) is gone within HANG_GONE_S of its start.
    Launch 2 (first retry): rank 1 SIGKILLed after step 1; the launch ends within 60 s. Both are
    infrastructure, so train runs a third time and the run passes: 3 runs of train, nothing left running,
    train.log holds all three launches, the history rows already there are untouched."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.scenario import qwen3_scenario
    from titanflow.judge import history
    from titanflow.run.summary import read_summary

    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-nan", tmp_path / "earlier")
    history.append_run(tmp_path / "earlier" / "summary.json")
    before = history.read_history()
    run_dir = tmp_path / "faults"
    injector = FaultInjector(run_dir)
    injector.start()
    with prefect_test_harness(server_startup_timeout=90):
        state = qwen3_scenario(steps=3, timeout_s=HANG_TIMEOUT_S, runs_dir=str(tmp_path), run_id="faults",
                               return_state=True)
        runs_of_train = train_run_count(state.state_details.flow_run_id)
        logs = _flow_run_logs(state.state_details.flow_run_id)
    injector.join(timeout=30)
    print(f"\nfaults: {injector.seen}")
    assert injector.error is None, injector.error
    assert not run_processes(run_dir)
    assert not psutil.pid_exists(injector.seen["stopped_pid"]) or \
        psutil.Process(injector.seen["stopped_pid"]).status() == psutil.STATUS_ZOMBIE
    assert injector.seen["hang_gone_s"] <= HANG_GONE_S + 5  # 5 s: the poll and process-start slack
    assert injector.seen["kill_gone_s"] <= 60

    assert state.is_completed(), state
    assert runs_of_train == 3
    assert f"timed out after {HANG_TIMEOUT_S} s" in logs  # launch 1's error, as the retry saw it
    # launch 2's root cause: rank 1, killed by signal 9 (tests/unit/launch/test_root_cause.py, ranks_killed)
    assert f"root cause (rank 1): Signal 9 (SIGKILL) received by PID {injector.seen['killed_pid']}" in logs
    summary = read_summary(run_dir / "summary.json")
    assert summary.verdict == "pass" and len(summary.losses) == 3
    train_log = (run_dir / "train.log").read_text(errors="replace")
    assert f"killed after the {HANG_TIMEOUT_S} s timeout" in train_log
    assert len(logged_steps(run_dir / "train.log")) >= 1 + 1 + 3  # every launch's steps, none overwritten
    table = history.read_history()
    assert changed_history_cells(before, table) == {}
    assert table[table.run_id == "faults"].verdict.tolist() == ["pass"]


def test_ctrl_c_of_titanflow_run_while_training_ends_everything_and_records_cancelled(tmp_path, tiny_assets):
    """SIGINT to the command's process group (what Ctrl-C in a terminal does) after 2 logged steps of a
    40-step run: the command exits 130 and prints cancelled; no process of the run, nor the temporary
    Prefect server it started, is left; summary.json and the history row say cancelled with the logged
    steps and no failure class; train.log is kept; earlier history rows are untouched. The weights come
    by Hub id from an offline cache with an HF token planted in the environment: the token is in no file
    of the run, the history or the Prefect server's home (database and logs)."""
    from helpers.secrets import assert_secret_absent

    from titanflow.judge import history
    from titanflow.run.summary import read_summary

    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-nan", tmp_path / "earlier")
    history.append_run(tmp_path / "earlier" / "summary.json")
    before = history.read_history()
    hub = tmp_path / "hub" / "models--org--tiny"
    shutil.copytree(tiny_assets.weights_dir, hub / "snapshots" / "0123abcd")
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("0123abcd")
    token, home = "hf_PLANTEDtoken123", tmp_path / "prefect-home"
    run_dir = tmp_path / "runs" / "ctrl-c"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {  # the temporary server
        "PREFECT_HOME": str(home), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "HF_TOKEN": token}
    command = subprocess.Popen([str(Path(sys.executable).parent / "titanflow"), "run", "native", "--target", "cpu",
                                "--steps", "40", "--weights", "org/tiny", "--runs-dir", str(run_dir.parent),
                                "--run-id", "ctrl-c"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    try:
        wait_until(lambda: len(logged_steps(run_dir / "train.log")) >= 2, 300, "2 logged steps")
        tree = [psutil.Process(command.pid), *psutil.Process(command.pid).children(recursive=True)]
        os.killpg(command.pid, signal.SIGINT)
        output, _ = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
    wait_until(lambda: not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 30,
          "every process the command started to end")
    assert command.returncode == 130, output[-3000:]
    assert "run cancelled, not failed" in output
    summary = read_summary(run_dir / "summary.json")
    assert summary.verdict == "cancelled" and summary.cancelled.cause == "interrupted (Ctrl-C)"
    assert len(summary.cancelled.losses) >= 2 and summary.failed_task is None
    assert summary.parameters["weights"] == "org/tiny"
    table = history.read_history()
    row = table[table.run_id == "ctrl-c"]
    assert row.verdict.tolist() == ["cancelled"] and row.failure_class.isna().all()
    assert changed_history_cells(before, table) == {}
    assert len(logged_steps(run_dir / "train.log")) >= 2
    assert token not in output
    searched = assert_secret_absent([run_dir, home, Path(os.environ["TITANFLOW_HISTORY"])], token)
    assert searched > 10  # the run folder, the server's database and the history table were searched
