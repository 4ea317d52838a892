"""When the machine runs out: a runs folder on a small file system (a tmpfs mounted for the test) and a rank in a
memory cgroup of its own.

- A run that cannot fit its runs folder is refused before launch, in seconds, naming the folder, the bytes needed and
  free, and the fix (titanflow.run.disk).
- A disk that fills during training (another writer takes the space after step 1) ends the run as ``disk_full``, not
  retried, with a history row; metrics.csv keeps the steps logged, no temporary file is left, and summary.json says
  what happened (titanflow.paths: the run folder's reserve gives the record room).
- A rank over its memory limit is ended by the kernel's out-of-memory killer: ``out_of_memory``, the rank named with
  its resident set and the fix, not retried (titanflow.launch.oom).
- Either way the printed summary says the cause, the fix and the logs, and no traceback (titanflow.record.failure_text);
  the tracebacks stay in summary.json, the logs it names and the Prefect log.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.memory_cgroup import limited_cgroup
from helpers.run_processes import logged_steps, rank_process, wait_until
from helpers.terminal import TITANFLOW

from titanflow.launch.oom import FIX
from titanflow.launch.resume import launches

pytestmark = pytest.mark.fault


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` (``mount`` needs root, as in CI), unmounted afterwards."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the test (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


@pytest.fixture()
def small_filesystem(tmp_path):
    """60 MiB: less than the default native run writes."""
    with _tmpfs(tmp_path / "small", "60m") as folder:
        yield folder


@pytest.fixture()
def fillable_filesystem(tmp_path):
    """512 MiB: room for the default native run's 0.42 GiB, until something else takes it."""
    with _tmpfs(tmp_path / "fillable", "512m") as folder:
        yield folder


def _env(**extra: str) -> dict[str, str]:
    """The session's environment without a server: ``titanflow run`` starts its own."""
    return {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | extra


def test_a_run_that_cannot_fit_its_runs_folder_is_refused_before_launch(small_filesystem):
    """The default native cpu run writes up to 0.42 GiB (tests/unit/run/test_disk.py); 60 MiB are free."""
    started = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(small_filesystem)],
                          capture_output=True, text=True, timeout=120, env=_env())
    wall_s = time.monotonic() - started
    print(f"\n{proc.stderr}\nrefused in {wall_s:.1f} s")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"runs_dir: {small_filesystem} has 0.06 GiB free and the run writes up to 0.42 GiB" in proc.stderr
    assert "fix: free space there, pass --runs-dir on a larger disk" in proc.stderr
    assert list(Path(small_filesystem).iterdir()) == []  # nothing written: no run folder, no record
    assert wall_s < 60  # before any build or launch (a fresh clone's first command imports for about 10 s)


def test_a_disk_that_fills_during_training_ends_the_run_as_disk_full_with_its_record(fillable_filesystem, tmp_path,
                                                                                     prefect_api):
    """The default native run (a full-state save every 5 steps, 113 MiB each) on 512 MiB; once step 1 is logged a
    filler leaves 8 MiB free, so step 5's save cannot be written."""
    from titanflow.record.history import read_history
    from titanflow.record.summary import read_summary

    history = tmp_path / "history"  # on another disk: the history row is written whatever the runs folder holds
    run_dir = fillable_filesystem / "full"
    prefect_log = open(tmp_path / "prefect.log", "w")  # stderr: the Prefect log, every line of it
    proc = subprocess.Popen([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(fillable_filesystem),
                             "--run-id", "full"], stdout=subprocess.PIPE, stderr=prefect_log, text=True,
                            env=_env(PREFECT_API_URL=prefect_api, TITANFLOW_HISTORY=str(history)))
    try:
        wait_until(lambda: len(logged_steps(run_dir / "train.log")) >= 1, 600, "step 1")
        free = os.statvfs(fillable_filesystem).f_bavail * os.statvfs(fillable_filesystem).f_frsize
        with open(fillable_filesystem / "filler", "wb") as filler:  # another writer takes the space
            filler.truncate(0)
            os.posix_fallocate(filler.fileno(), 0, free - 8 * 2**20)
        output, _ = proc.communicate(timeout=900)
    finally:
        proc.kill()
        prefect_log.close()
    print(f"\n{output[-3000:]}")
    assert proc.returncode == 1
    summary = read_summary(run_dir / "summary.json")
    assert (summary.verdict, summary.failed_task) == ("fail", "train")
    assert "No space left on device" in summary.error and f"{run_dir} has " in summary.error
    assert summary.train is None and summary.export is None
    steps = [int(line.split(",")[0]) for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == list(range(1, len(logged_steps(run_dir / "train.log")) + 1)) and 1 <= len(steps) <= 5
    assert not list(fillable_filesystem.rglob("*.tmp")) and not (run_dir / ".space-reserve").exists()
    (row,) = read_history(history_dir=history).itertuples()
    assert (row.run_id, row.verdict, row.failure_class) == ("full", "fail", "disk_full")
    assert len(launches(run_dir / "train.log")) == 1  # not retried: the same run would fill the same disk
    assert "disk_full" in output and "No space left on device" in output
    _assert_cause_not_tracebacks(output, run_dir, "free space there, or pass --runs-dir on a larger disk")
    assert any("Traceback" in log.read_text() for log in (run_dir / "train" / "ranks").rglob("stderr.log"))  # kept


def _assert_cause_not_tracebacks(summary_text: str, run_dir: Path, fix: str) -> None:
    """The printed summary (stdout; titanflow.record.failure_text) says the cause, the fix and the logs, and no
    traceback: neither torch elastic's ChildFailedError block nor a rank's."""
    assert "Traceback" not in summary_text and "ChildFailedError" not in summary_text, summary_text
    assert re.search(r"^cause +train: torchrun exited 1; ", summary_text, re.MULTILINE), summary_text
    assert re.search(rf"^fix +{re.escape(fix)}$", summary_text, re.MULTILINE), summary_text
    logs = f"{run_dir / 'train.log'}, {run_dir / 'train' / 'ranks'}, {run_dir / 'summary.json'}"
    assert re.search(rf"^logs +{re.escape(logs)}$", summary_text, re.MULTILINE), summary_text


def test_a_rank_over_its_memory_limit_is_out_of_memory_and_not_retried(tmp_path, prefect_api):
    """Rank 1 of the default native run is moved, once step 1 is logged, into a memory cgroup that lets it allocate
    64 MiB more (its pages so far stay charged where they were): its next steps need more, and the kernel's
    out-of-memory killer ends it."""
    from titanflow.record.history import read_history
    from titanflow.record.summary import read_summary

    history, run_dir = tmp_path / "history", tmp_path / "runs" / "oom"
    prefect_log = open(tmp_path / "prefect.log", "w")  # stderr: the Prefect log, every line of it
    proc = subprocess.Popen([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(tmp_path / "runs"),
                             "--run-id", "oom"], stdout=subprocess.PIPE, stderr=prefect_log, text=True,
                            env=_env(PREFECT_API_URL=prefect_api, TITANFLOW_HISTORY=str(history)))
    try:
        with limited_cgroup(64 * 2**20) as folder:
            wait_until(lambda: len(logged_steps(run_dir / "train.log")) >= 1, 600, "step 1")
            rank = rank_process(run_dir, 1)
            assert rank is not None
            (folder / "cgroup.procs").write_text(str(rank.pid))
            output, _ = proc.communicate(timeout=900)
    finally:
        proc.kill()
        prefect_log.close()
    print(f"\n{output[-3000:]}")
    summary = read_summary(run_dir / "summary.json")
    assert (summary.verdict, summary.failed_task) == ("fail", "train")
    assert f"root cause (rank 1): Signal 9 (SIGKILL) received by PID {rank.pid}: killed by the kernel's " \
           "out-of-memory killer at a resident set of " in summary.error
    assert "fix: a smaller --global-batch-size or --seq-len, or more ranks" in summary.error
    (row,) = read_history(history_dir=history).itertuples()
    assert (row.verdict, row.failure_class) == ("fail", "out_of_memory")
    assert len(launches(run_dir / "train.log")) == 1  # not retried
    _assert_cause_not_tracebacks(output, run_dir, FIX.removeprefix("fix: "))
    assert re.search(r"^cause .*killed by the kernel's out-of-memory killer at a resident set of ", output, re.MULTILINE)
