"""Resume a run and task caching (issue 11), with real `titanflow run` commands against one Prefect server:

- a run whose `titanflow run` process is SIGKILLed mid-training (a node reboot, an OOM kill of the flow) is
  continued by `titanflow run --resume <id>` in its own folder, past its damaged step checkpoints (one the ranks
  cannot load: class checkpoint; a truncated and a missing shard: set aside before the launch), and its loss curve is
  the uninterrupted golden;
- an identical re-run answers pull_weights, torchtitan's config and compile_warmup from Prefect's cache;
- a run stopped by SIGTERM and resumed twice talks to no Prefect server but its commands' own, and leaves none.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.run_processes import logged_steps, run_processes, wait_until

from titanflow.launch.metrics import log_lines, parse_launch_line, parse_step_line
from titanflow.launch.resume import launches
from titanflow.record.summary import read_summary

pytestmark = pytest.mark.fault

TITANFLOW = Path(sys.executable).parent / "titanflow"
#: A full-state save every 2 steps of the default 10-step run; the flow is killed once step 5 is logged, during step 6
#: (2.5-10 s a step on 2 busy cores; a save comes after its step's line), so steps 2 and 4 are the complete saves
#: (torchtitan keeps the newest 2: 4 and 6, or 6 and 8, when the ranks completed a later save before the kill).
INTERVAL, KILL_AFTER_STEP = 2, 5


def _env(api: str, **extra: str) -> dict:
    return {**os.environ, "PREFECT_API_URL": api, **extra}


def _task_states(api: str, flow_run_id: str) -> dict[str, str]:
    """{task name: state name} of the flow run's task runs, from the Prefect API (a task run is named
    ``<task>-<suffix>``)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name.rsplit("-", 1)[0]: run.state.name for run in runs}


def _flow_run_state(api: str, flow_run_id: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).state


def _resume(tmp_path: Path, api: str) -> tuple[subprocess.CompletedProcess, float]:
    """``titanflow run --resume killed``: its output and wall seconds."""
    started = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "run", "--resume", "killed", "--runs-dir", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=900, env=_env(api))
    return proc, time.monotonic() - started


def test_a_run_killed_mid_training_is_continued_by_resume_and_its_curve_is_the_golden(tmp_path, prefect_api):
    """`titanflow run native --target cpu --checkpoint-interval 2` (the golden workload, 10 steps) is SIGKILLed once
    step 5 is logged: its ranks die with it, summary.json keeps the record written at the start (no verdict); its
    complete saves are steps L - 2 and L (L = 4, or 6 or 8 if the ranks completed a later save before the kill).

    Then its saves are damaged as a node that lost power before its file system flushed leaves them, and it is resumed
    twice in its folder (pull_weights, render_config and compile_warmup answer from Prefect's cache):

    1. step-L's rank-0 shard zero-filled at its full size (blocks allocated, never written): titanflow's check of the
       files passes it, the ranks' DCP load fails: one launch, failure class ``checkpoint``, not retried, step-L set
       aside (load-failed), the printed summary without a traceback;
    2. step-L's save back (its copy taken before 1) with its shard truncated, and a later save whose shard is gone
       (step-L's copy again, as step-(L+2): torchtitan keeps only 2 saves, so a third is a copy): both set aside before
       the launch, which resumes from step L - 2 (launch 3 in train.log, whose launch 1 lines are kept); the 10 losses
       equal goldens/loss_curves/native-cpu-random.curve.csv at torchtitan's 5 decimals where the numerics are the
       golden's. summary.json and the history row say resumed twice, last from step L - 2."""
    from helpers.dcp_saves import SHARD, truncate_shard, zero_shard

    from titanflow.judge.environment import environment_key
    from titanflow.judge.goldens import curve_path, read_curve
    from titanflow.launch.resume import step_folders
    from titanflow.record import history

    run_dir = tmp_path / "killed"
    checkpoint = run_dir / "train" / "checkpoint"
    log = (tmp_path / "first.out").open("w")
    first = subprocess.Popen([str(TITANFLOW), "run", "native", "--target", "cpu", "--checkpoint-interval",
                              str(INTERVAL), "--run-id", "killed", "--runs-dir", str(tmp_path)],
                             stdout=log, stderr=subprocess.STDOUT, env=_env(prefect_api), start_new_session=True)
    started = time.monotonic()
    try:
        wait_until(lambda: len(logged_steps(run_dir / "train.log")) >= KILL_AFTER_STEP, 600,
                   f"step {KILL_AFTER_STEP} of the first run")
        steps_at_kill = len(logged_steps(run_dir / "train.log"))
        first.send_signal(signal.SIGKILL)  # the flow process only: its torchrun dies with it (parent-death signal)
        first.wait(timeout=30)
        killed_s = time.monotonic() - started
        wait_until(lambda: not run_processes(run_dir), 60, "the killed run's training to end")
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log.close()
    record = read_summary(run_dir / "summary.json")
    assert record.verdict is None and record.train is None  # the record written at the start, nothing after
    complete = sorted(step for step, folder in step_folders(checkpoint).items() if (folder / ".metadata").is_file())
    left = complete[-1]
    assert left in (2 * INTERVAL, 3 * INTERVAL, 4 * INTERVAL) and complete == [left - INTERVAL, left]
    before = left - INTERVAL
    assert _flow_run_state(prefect_api, record.flow_run_id).name == "Running"  # no worker saw it die

    # 1. step-L's bytes wrong, its files all there: the ranks' load fails once, class checkpoint
    copy = tmp_path / f"step-{left}.copy"
    shutil.copytree(checkpoint / f"step-{left}", copy)
    zero_shard(checkpoint / f"step-{left}")
    failed, failed_s = _resume(tmp_path, prefect_api)
    once = read_summary(run_dir / "summary.json")
    print(f"\nresume 1 (step-{left} zero-filled): {failed_s:.0f} s\n{failed.stdout}")
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    assert (once.verdict, once.failed_task) == ("fail", "train")
    assert f"checkpoint: checkpoint/step-{left} did not load in the ranks" in once.error
    assert re.search(r"^failure class +checkpoint$", failed.stdout, re.MULTILINE)
    assert re.search(rf"^cause +train: torchrun exited 1; checkpoint: checkpoint/step-{left} did not load in the "
                     "ranks", failed.stdout, re.MULTILINE)
    assert "Traceback" not in failed.stdout and "ChildFailedError" not in failed.stdout
    assert [launch for launch, _ in launches(run_dir / "train.log")] == [1, 2]  # not retried
    assert (checkpoint / "set-aside" / f"step-{left}.broken-load-failed" / ".metadata").is_file()  # kept
    row = history.read_history().query("run_id == 'killed'")
    assert (row.verdict.tolist(), row.failure_class.tolist()) == (["fail"], ["checkpoint"])

    # 2. step-L back, truncated; a later save without its shard: both set aside, resumed from L - 2 in one launch
    shutil.copytree(copy, checkpoint / f"step-{left}")
    size = truncate_shard(checkpoint / f"step-{left}", keep=4096)
    shutil.copytree(copy, checkpoint / f"step-{left + INTERVAL}")
    missing = (checkpoint / f"step-{left + INTERVAL}" / SHARD).stat().st_size
    (checkpoint / f"step-{left + INTERVAL}" / SHARD).unlink()
    resumed, resume_s = _resume(tmp_path, prefect_api)
    summary = read_summary(run_dir / "summary.json")
    print(f"\nresume: first run killed after {killed_s:.0f} s at {steps_at_kill} logged steps; the resumed run "
          f"took {resume_s:.0f} s (train {summary.timings_s.get('train', float('nan')):.0f} s), cached "
          f"{summary.cached_tasks}, timings {json.dumps(summary.timings_s)}\n{resumed.stdout}")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert re.search(rf"^resumed +2 time\(s\), last from step {before}$", resumed.stdout, re.MULTILINE)
    assert summary.verdict == "pass", summary.reason
    assert summary.run_id == "killed" and summary.flow_run_id not in (record.flow_run_id, once.flow_run_id)
    assert summary.resumes == 2
    assert [(c.previous_flow_run_id, c.previous_verdict, c.from_step) for c in summary.resumed] == [
        (record.flow_run_id, None, left), (once.flow_run_id, "fail", before)]
    assert (summary.train.resumed_from_step, summary.train.attempts) == (before, 3)
    assert summary.train.set_aside == [
        f"checkpoint/step-{left + INTERVAL} -> checkpoint/set-aside/step-{left + INTERVAL}.broken-missing-shard "
        f"({SHARD} is missing; its .metadata records {missing:,} bytes in it)",
        f"checkpoint/step-{left} -> checkpoint/set-aside/step-{left}.broken-truncated-shard ({SHARD} has 4,096 "
        f"bytes; its .metadata records {size:,})"]
    assert re.search(rf"^set aside +checkpoint/step-{left + INTERVAL} -> ", resumed.stdout, re.MULTILINE)
    assert sorted(p.name for p in (checkpoint / "set-aside").iterdir()) == sorted([
        f"step-{left}.broken-load-failed", f"step-{left}.broken-truncated-shard",
        f"step-{left + INTERVAL}.broken-missing-shard"])  # each kept
    assert summary.cached_tasks == ["pull_weights", "render_config", "compile_warmup"]
    assert summary.parameters["checkpoint_interval"] == INTERVAL and summary.parameters["resume"] == "killed"
    # the first resume set the killed run's flow run Crashed (its processes gone), so its training slot was free at
    # once instead of after its lease expired (it had waited 70 s for itself)
    assert _flow_run_state(prefect_api, record.flow_run_id).name == "Crashed"
    assert summary.slot_wait_s < 5

    lines = list(log_lines(run_dir / "train.log"))
    opened = [i for i, line in enumerate(lines) if parse_launch_line(line)]
    assert [parse_launch_line(lines[i]) for i in opened] == [(1, None), (2, left), (3, before)]
    first_launch = {row["step"]: row["loss"] for row in map(parse_step_line, lines[:opened[1]]) if row}
    assert max(first_launch) >= KILL_AFTER_STEP  # launch 1's lines are kept
    assert not [row for row in map(parse_step_line, lines[opened[1]:opened[2]]) if row]  # launch 2 trained nothing
    curve = [f"{x:.5f}" for x in summary.losses]
    assert len(curve) == 10 and curve[:before] == [f"{first_launch[s]:.5f}" for s in range(1, before + 1)]
    golden = read_curve(curve_path("native", "cpu", "random"))
    if golden.same_numerics(environment_key(summary.environment), None):
        assert curve == [f"{golden.losses[s]:.5f}" for s in range(1, 11)]
    else:
        print(f"resume: numerics other than the golden's ({golden.environment}); held to the golden_curve band")
        assert max(abs(float(c) - golden.losses[s]) for s, c in enumerate(curve, 1)) <= 0.2
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in metrics[1:]] == [str(s) for s in range(1, 11)]

    row = history.read_history().query("run_id == 'killed'")
    assert (row.verdict.tolist(), row.resumes.tolist(), row.resumed_from_step.tolist()) == (["pass"], [2], [before])


def test_an_identical_rerun_answers_the_tasks_before_training_from_the_cache(tmp_path, prefect_api):
    """The same `titanflow run native --target cpu --steps 3` twice, Prefect's results in a fresh folder (so the
    first run is cold). The second: pull_weights, torchtitan_config (inside render_config) and compile_warmup end
    Cached; render_config runs (it writes the new run's own folder: job.json names it) and build_tiny_weights is
    not reached; the curve is the first run's. Wall times cold and warm are printed; render_config, which loses
    its torchtitan import (about 6 s), takes under half as long."""

    env = _env(prefect_api, PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(tmp_path / "results"))
    runs, walls = tmp_path / "runs", []
    for _ in range(2):
        started = time.monotonic()
        proc = subprocess.run([str(TITANFLOW), "run", "native", "--target", "cpu", "--steps", "3", "--runs-dir",
                               str(runs)], check=False, capture_output=True, text=True, timeout=900, env=env)
        walls.append(time.monotonic() - started)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cold, warm = sorted((read_summary(p / "summary.json") for p in runs.iterdir()), key=lambda s: s.started_at)
    states = {"cold": _task_states(prefect_api, cold.flow_run_id), "warm": _task_states(prefect_api, warm.flow_run_id)}
    print(f"\ncaching: wall cold {walls[0]:.1f} s, warm {walls[1]:.1f} s (ratio {walls[1] / walls[0]:.2f}); "
          f"task seconds cold {json.dumps(cold.timings_s)}; warm {json.dumps(warm.timings_s)}; states {states}")
    assert os.listdir(tmp_path / "results")  # the results are where the run was told to keep them
    for task in ("pull_weights", "build_tiny_weights", "render_config", "torchtitan_config", "compile_warmup"):
        assert states["cold"][task] == "Completed", task
    for task in ("pull_weights", "torchtitan_config", "compile_warmup"):
        assert states["warm"][task] == "Cached", task
    assert states["warm"]["render_config"] == "Completed" and "build_tiny_weights" not in states["warm"]
    assert (cold.cached_tasks, warm.cached_tasks) == ([], ["pull_weights", "compile_warmup"])
    # compile off and the mask built eagerly: the cold run's warm-up skipped, and the warm run has that from
    # Prefect's cache
    assert cold.compile_warmup.status == warm.compile_warmup.status == "skipped"
    assert warm.losses == cold.losses and warm.verdict == cold.verdict == "pass"
    assert warm.timings_s["render_config"] < 0.5 * cold.timings_s["render_config"]
    assert json.loads((runs / warm.run_id / "job" / "trainer_config.json").read_text())["dump_folder"] == str(
        runs / warm.run_id / "train")


def test_a_retried_flow_run_continues_its_own_run_folder(tmp_path, monkeypatch):
    """A flow run retried in place (same flow run, run count 2: what the UI's Retry of a failed flow run does; here
    through the flow's own retries) continues the run folder its first attempt made: its export fails once, the
    retry resumes that run (one folder, resumed once, from the flow run itself), answers pull_weights,
    render_config, compile_warmup and the finished training from the cache (train.log holds one launch), runs
    the export again, and passes."""
    from prefect.testing.utilities import prefect_test_harness

    import titanflow.tasks.export
    from titanflow.export.assemble import ExportError
    from titanflow.flows.scenario import qwen3_scenario

    real, calls = titanflow.tasks.export.export_run, []

    def export_failing_once(job, run_dir):
        calls.append(run_dir)
        if len(calls) == 1:
            raise ExportError("export: planted failure of the first attempt")
        return real(job, run_dir)

    monkeypatch.setattr(titanflow.tasks.export, "export_run", export_failing_once)
    with prefect_test_harness(server_startup_timeout=90):
        state = qwen3_scenario.with_options(retries=1, retry_delay_seconds=1)(
            steps=3, runs_dir=str(tmp_path), run_id="retried", return_state=True)
        flow_run_id = str(state.state_details.flow_run_id)
    assert state.is_completed(), state
    assert [p.name for p in tmp_path.iterdir()] == ["retried"] and len(calls) == 2
    summary = read_summary(tmp_path / "retried" / "summary.json")
    print(f"\nretried flow run: cached {summary.cached_tasks}, timings {json.dumps(summary.timings_s)}")
    assert summary.verdict == "pass" and summary.flow_run_id == flow_run_id
    (continued,) = summary.resumed
    assert (continued.flow_run_id, continued.previous_flow_run_id, continued.previous_verdict) == (
        flow_run_id, flow_run_id, "fail")
    assert "planted failure" in (continued.previous_reason or "")
    # the training finished before the export failed: the retry takes it from the cache, without a launch
    assert summary.cached_tasks == ["pull_weights", "render_config", "compile_warmup", "train"]
    assert len(summary.losses) == 3 and summary.train.attempts == 1
    launches = [line for line in log_lines(tmp_path / "retried" / "train.log") if parse_launch_line(line)]
    assert len(launches) == 1


def _own_processes(home: Path) -> list[psutil.Process]:
    """Live processes whose environment names ``home`` as PREFECT_HOME: whatever the test's commands started."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PREFECT_HOME") == str(home) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_a_run_stopped_by_sigterm_and_resumed_twice_talks_only_to_its_own_servers(tmp_path):
    """`titanflow run native --steps 4 --checkpoint-interval 1` with no PREFECT_API_URL (each command starts its own
    temporary server), SIGTERMed once step 2 is logged; `--resume` SIGTERMed once its launch logs step 3; `--resume`
    to the end. Each stopped command prints the run's record (verdict cancelled) and exits 143. No output says Prefect
    started a server of its own ("Starting temporary server": a client that knew
    no API URL, e.g. on a thread), and once each command has ended no process of the test's PREFECT_HOME is left: the
    three temporary servers ended with their commands."""
    home, runs = tmp_path / "home", tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(home)}
    run_dir, outputs, codes = runs / "R", [], []

    def stopped_at(args: list[str], step: int, launch: int) -> None:
        out = (tmp_path / f"launch-{launch}.out").open("w")
        proc = subprocess.Popen([str(TITANFLOW), "run", *args, "--runs-dir", str(runs)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
        try:
            wait_until(lambda: len(launches(run_dir / "train.log")) >= launch
                       and any(row["step"] >= step for row in logged_steps(run_dir / "train.log")[-1:]), 600,
                       f"step {step} of launch {launch}")
            proc.send_signal(signal.SIGTERM)  # a Prefect cancel's signal, or a node told to stop
            codes.append(proc.wait(timeout=120))  # the run recorded cancelled (checked below)
        finally:
            if proc.poll() is None:
                proc.kill()
            out.close()
        outputs.append((tmp_path / f"launch-{launch}.out").read_text())
        wait_until(lambda: not _own_processes(home), 60, f"every process of command {launch} to end")

    stopped_at(["native", "--target", "cpu", "--steps", "4", "--checkpoint-interval", "1", "--run-id", "R"], 2, 1)
    stopped_at(["--resume", "R"], 3, 2)
    last = subprocess.run([str(TITANFLOW), "run", "--resume", "R", "--runs-dir", str(runs)], capture_output=True,
                          text=True, timeout=900, env=env)
    outputs.append(last.stdout + last.stderr)
    assert last.returncode == 0, outputs[-1][-3000:]
    for i, output in enumerate(outputs[:2], 1):  # each stopped command printed the run's record, and exited 128 + 15
        assert codes[i - 1] == 143 and re.search(r"^verdict +cancelled$", output, re.M), f"command {i}: {output[-3000:]}"
        assert "terminated (SIGTERM); run cancelled, not failed" in output, f"command {i}: {output[-3000:]}"
    for i, output in enumerate(outputs, 1):
        assert "Starting temporary server" not in output, f"command {i}: {output[-3000:]}"
        assert "--- Logging error ---" not in output, f"command {i}: {output[-3000:]}"
    wait_until(lambda: not _own_processes(home), 60, "every process of the last command to end")
    summary = read_summary(run_dir / "summary.json")
    assert (summary.verdict, summary.resumes, len(summary.losses)) == ("pass", 2, 4)
    assert [cause for cause in (r.previous_verdict for r in summary.resumed)] == ["cancelled", "cancelled"]
