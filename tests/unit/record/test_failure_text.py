"""titanflow.record.failure_text: a failed run's error said as its cause, its fix and its logs. The errors are the
training's own (titanflow.launch.torchrun.launch_error) over the real rank logs of tests/fixtures/failure_logs, and
one in its words for an out-of-memory kill (titanflow.launch.oom.explain over the kernel's line for the killed pid)."""

from __future__ import annotations

from helpers import FIXTURES

from titanflow.launch import oom
from titanflow.launch.process import ProcessResult
from titanflow.launch.torchrun import launch_error
from titanflow.record.failure_text import FIXES, MAX_CAUSE_CHARS, explain

KILLED = FIXTURES / "failure_logs" / "ranks_killed"  # rank 1 sent SIGKILL after step 1: torchrun names PID 20117
#: The kernel's line for that pid, as the out-of-memory killer writes it (tests/unit/launch/test_oom.py's form).
KERNEL_LOG = ("[12636.707347] Memory cgroup out of memory: Killed process 20117 (python3) total-vm:426168kB, "
              "anon-rss:859832kB, file-rss:6520kB, shmem-rss:0kB, UID:0 pgtables:468kB oom_score_adj:0\n")


def _run_dir(tmp_path):
    """A run folder holding the fixture's train.log and rank logs (train/ranks)."""
    run_dir = tmp_path / "killed"
    (run_dir / "train" / "ranks").mkdir(parents=True)
    (run_dir / "train.log").write_text((KILLED / "train.log").read_text())
    (run_dir / "train" / "ranks" / "launch").symlink_to(KILLED / "launch")
    return run_dir


def _tail(run_dir) -> list[str]:
    return (run_dir / "train.log").read_text().splitlines()[-25:]


def test_a_killed_rank_is_said_by_its_root_cause_with_the_class_fix_and_the_logs(tmp_path):
    run_dir = _run_dir(tmp_path)
    result = ProcessResult(returncode=1, wall_s=9.0, timed_out=False, peak_rss_bytes=2**30, tail=_tail(run_dir))
    error = str(launch_error("train", "torchrun exited 1", result, run_dir / "train.log", run_dir / "train" / "ranks"))
    assert "ChildFailedError" in error or "Root Cause" in error  # what the console must not show
    said = explain(error, "infrastructure", run_dir)
    assert said.cause == "train: torchrun exited 1; root cause (rank 1): Signal 9 (SIGKILL) received by PID 20117"
    assert said.fix == FIXES["infrastructure"].format(run_id="killed")
    assert said.logs == [str(run_dir / "train.log"), str(run_dir / "train" / "ranks")]  # no summary.json written


def test_an_out_of_memory_kill_keeps_its_resident_set_in_the_cause_and_its_own_fix(tmp_path):
    run_dir = _run_dir(tmp_path)
    root = oom.explain("Signal 9 (SIGKILL) received by PID 20117", oom.LaunchMark(12600.0, None), log=KERNEL_LOG)
    tail = "\n".join(_tail(run_dir))
    error = f"train: torchrun exited 1; root cause (rank 1): {root}; full log {run_dir}/train.log\n--- last lines ---\n{tail}"
    said = explain(error, "out_of_memory", run_dir)
    assert said.cause == ("train: torchrun exited 1; root cause (rank 1): Signal 9 (SIGKILL) received by PID 20117: "
                          "killed by the kernel's out-of-memory killer at a resident set of 0.82 GiB (the kernel's log)")
    assert said.fix == oom.FIX.removeprefix("fix: ")  # the error's own fix, not the class's


def test_a_full_disk_gives_its_own_fix_and_the_root_cause_after_it():
    """launch_error's order for a full disk: the space left and its fix first, then the rank's root cause."""
    error = ("train: torchrun exited 1; disk full: /runs/full has 8,388,608 bytes free (No space left on device); fix: "
             "free space there, or pass --runs-dir on a larger disk; root cause (rank 0): OSError: [Errno 28] No space "
             "left on device (in torch.distributed.checkpoint: CheckpointException ranks:dict_keys([0, 1])); full log "
             "/runs/full/train.log\n--- last lines ---\nTraceback (most recent call last):\n  ...\nOSError: [Errno 28]")
    said = explain(error, "disk_full")
    assert said.fix == "free space there, or pass --runs-dir on a larger disk"
    whole = ("train: torchrun exited 1; disk full: /runs/full has 8,388,608 bytes free (No space left on device); root "
             "cause (rank 0): OSError: [Errno 28] No space left on device (in torch.distributed.checkpoint: "
             "CheckpointException ranks:dict_keys([0, 1]))")
    assert said.cause == whole[:MAX_CAUSE_CHARS - 1] + "…"  # about two lines; summary.json has all of it
    assert len(said.cause) == MAX_CAUSE_CHARS and said.logs == []


def test_an_error_of_no_known_class_and_no_fix_says_no_fix():
    said = explain("validate: ValueError: parity: KL 3.1 nats/token", None)
    assert (said.cause, said.fix) == ("validate: ValueError: parity: KL 3.1 nats/token", "")
