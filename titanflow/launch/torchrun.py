"""Training: launch the rendered job with torchrun and measure it.

Writes ``runs/<id>/train.log`` (rank 0, streamed live to the Prefect run log),
``runs/<id>/train/ranks/`` (every rank's own log, from torchrun ``--log-dir``)
and ``runs/<id>/metrics.csv`` (titanflow.launch.metrics.COLUMNS: step, loss, grad_norm, memory_gib, tps, tflops,
mfu_pct, step_time_s), read from torchtitan's TensorBoard event files under ``runs/<id>/train/tb/`` at their full
precision, else from rank 0's console lines (titanflow.launch.event_files.run_metrics; the result's
``metrics_source`` says which and why).

Every launch of a run appends to ``train.log`` after its launch line, which says the step it resumes
from (titanflow.launch.resume); ``metrics.csv`` and the result's losses are the run's curve over all its
launches, each step once, from the launch that trained it last (titanflow.launch.metrics.metrics_table).

A launch that resumed from a step checkpoint and failed inside ``torch.distributed.checkpoint`` before its first step
(:func:`checkpoint_load_failed`: the ranks could not load what titanflow's check of its files passed, e.g. bytes a
flush never wrote) sets that checkpoint aside (``load-failed``) and says so in its error, failure class ``checkpoint``
(titanflow.judge.failures): never retried, and the next resume goes on from the intact one before it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import sys
from pathlib import Path

from titan_cfg.job import CHECKPOINT_FOLDER, Job
from titanflow import paths
from titanflow.launch import oom
from titanflow.launch.event_files import run_metrics, tb_dir
from titanflow.launch.kubernetes.launch import run_pods
from titanflow.launch.metrics import log_tail, step_spans
from titanflow.launch.nodes import first_node_error, nodes_dir
from titanflow.launch.process import ProcessResult, run_streaming
from titanflow.launch.render import RenderedJob
from titanflow.launch.resume import Resume, checkpoint_folder, last_launch, prepare, remove_incomplete
from titanflow.launch.root_cause import RankError, first_rank_error
from titanflow.launch.step_checkpoint import SET_ASIDE, set_aside
from titanflow.launch.slurm.job import recover_rank0_steps, run_job
from titanflow.results import TrainResult, non_finite_steps

#: Lines of the launcher's log an error carries, and the characters kept of each.
ERROR_TAIL_LINES, ERROR_LINE_CHARS = 25, 500

#: Free bytes under which a failed launch's disk counts as full (:func:`_room_for_the_record`).
FULL_BELOW_BYTES = 16 * 2**20

#: A rank's error of a full file system (its checkpoint save, its logs): said with the space left in the run folder.
DISK_FULL = re.compile(paths.DISK_FULL_TEXT)


class TrainingError(RuntimeError):
    """torchrun failed, timed out, or logged no step; the message names the root cause (the first
    failing rank's own error, titanflow.launch.root_cause) and carries the log tail."""


def launch_root_cause(result: ProcessResult, log_path: Path, ranks_dir: Path, nodes_job: Job | None = None,
                      since: oom.LaunchMark | None = None) -> RankError | None:
    """The first failing rank's own error, read from torchrun's rank logs under ``ranks_dir`` and the launcher's log
    (``log_path``); for a job on Slurm or Kubernetes (``nodes_job``) on the node that failed first
    (titanflow.launch.nodes.first_node_error). On this machine's own ranks, a SIGKILL the kernel's out-of-memory
    killer sent since the launch started (``since``) is said as such (titanflow.launch.oom). None for a launch the
    watchdog ended (its ranks only report being stopped) or one no rank left an error of."""
    if result.timed_out:
        return None
    if nodes_job is not None:
        return first_node_error(nodes_job)
    root = first_rank_error(ranks_dir, log_tail(log_path, 200) or "")
    if root is not None and since is not None:
        root = root.model_copy(update={"message": oom.explain(root.message, since, result.peak_rss_bytes)})
    return root


def checkpoint_load_failed(root: RankError | None, log_path: Path) -> bool:
    """Whether a failed launch that resumed from a step checkpoint failed loading it: it logged no step (by then its
    only call of ``torch.distributed.checkpoint`` is the load), its output or its root cause holds DCP's
    ``CheckpointException`` (:func:`titanflow.launch.resume.last_launch`), and the machine did not run out (a full
    disk, a kill: those classes come first)."""
    steps, dcp_failed = last_launch(log_path)
    message = root.message if root is not None else ""
    if steps or not (dcp_failed or "CheckpointException" in message):
        return False
    return not (DISK_FULL.search(message) or oom.SIGKILLED.search(message))


def launch_error(what: str, why: str, result: ProcessResult, log_path: Path, ranks_dir: Path,
                 nodes_job: Job | None = None, since: oom.LaunchMark | None = None,
                 root: RankError | None = ...) -> TrainingError:  # type: ignore[assignment]
    """``<what>: <why>; root cause (rank N): <its exception>; full log <path>`` and the last
    :data:`ERROR_TAIL_LINES` lines of the launch, each at most :data:`ERROR_LINE_CHARS` characters. The root cause
    is ``root`` when given, else :func:`launch_root_cause` of the other arguments; a full disk is said with the space
    left in the run folder."""
    if root is ...:
        root = launch_root_cause(result, log_path, ranks_dir, nodes_job, since)
    cause = f"; root cause (rank {root.rank}): {root.message}" if root else ""
    if any(DISK_FULL.search(line) for line in [cause, *result.tail]):
        why += (f"; disk full: {log_path.parent} has {shutil.disk_usage(log_path.parent).free:,} bytes free (No space "
                "left on device); fix: free space there, or pass --runs-dir on a larger disk")
    tail = "\n".join(line if len(line) <= ERROR_LINE_CHARS else line[:ERROR_LINE_CHARS] + " ... [cut]"
                     for line in result.tail[-ERROR_TAIL_LINES:])
    said = f"\n--- last lines ---\n{tail}" if tail else "; the launch printed nothing before it ended"
    return TrainingError(f"{what}: {why}{cause}; full log {log_path}{said}")


def _steady(table, column: str) -> float:
    """The median of ``column`` over steps >= 2 (step 1 carries start-up: the first batch, lazy inits), or step 1's
    value in a one-step run; NaN where the source has none."""
    later = table[table.step >= 2][column]
    return float(later.median()) if len(later) else float(table[column].iloc[0])


def _finite(value: float) -> float | None:
    """``value``, or None for NaN (the console line has no step time)."""
    return value if math.isfinite(value) else None


def ranks_dir(rendered: RenderedJob) -> Path:
    """Where torchrun writes every rank's own log (its ``--log-dir``)."""
    return Path(rendered.argv[rendered.argv.index("--log-dir") + 1])


def resolve_launcher(argv: list[str]) -> list[str]:
    """Replace a bare ``torchrun`` by the one installed next to this Python (the project venv)."""
    local = Path(sys.executable).parent / argv[0]
    return [str(local) if local.exists() else (shutil.which(argv[0]) or argv[0]), *argv[1:]]


def launch(rendered: RenderedJob, *, timeout_s: float, log_name: str = "train.log", on_lines=lambda _: None,
           extra_env: dict[str, str] | None = None, hold_nodes=None):
    """Run the rendered torchrun line, its output lines to ``on_lines`` (in order, in batches:
    titanflow.launch.forward); returns (ProcessResult, log path). A Slurm
    job (``rendered.scheduler``) is submitted and followed instead (titanflow.launch.slurm.job.run_job, which holds
    ``hold_nodes(hosts)`` over the hosts of its nodes while it trains); a Kubernetes job's launch is handed to its
    pods (titanflow.launch.kubernetes.launch.run_pods).

    Raises:
        ValueError: ``extra_env`` for a job on Slurm or Kubernetes (its environment is its launch.sh's).
    """
    log_path = Path(rendered.run_dir) / log_name
    if rendered.scheduler != "local" and extra_env:
        raise ValueError(f"a {rendered.scheduler} job runs with the environment of its launch.sh; cannot add "
                         f"{sorted(extra_env)}")
    if rendered.scheduler == "slurm":
        return run_job(rendered, timeout_s=timeout_s, log_path=log_path, on_lines=on_lines, hold_nodes=hold_nodes), log_path
    if rendered.scheduler == "kubernetes":
        return run_pods(rendered, timeout_s=timeout_s, log_path=log_path, on_lines=on_lines), log_path
    result = run_streaming(
        resolve_launcher(rendered.argv),
        env={**os.environ, **rendered.env, **(extra_env or {})},
        log_path=log_path, timeout_s=timeout_s, on_lines=on_lines, cwd=paths.REPO_ROOT,
    )
    return result, log_path


def _room_for_the_record(job: Job, log_path: Path, on_lines) -> None:
    """After a launch that failed on a disk with less than :data:`FULL_BELOW_BYTES` free: remove the step checkpoint
    it cut short (the next launch would: titanflow.launch.resume.prepare), so the run's curve and record can be
    written, and say so in train.log and to ``on_lines``."""
    free = shutil.disk_usage(log_path.parent).free
    if free >= FULL_BELOW_BYTES:
        return
    removed = remove_incomplete(checkpoint_folder(job))
    if removed:
        line = (f"titanflow: the disk of {log_path.parent} is full ({free:,} bytes free): removed {', '.join(removed)} "
                "to make room for the run's curve and record")
        with contextlib.suppress(OSError), open(log_path, "a") as log:
            log.write(line + "\n")
        on_lines([line])


def _set_aside_unloadable(job: Job, step: int, log_path: Path, on_lines) -> str:
    """Set aside step ``step``'s checkpoint, which the ranks could not load (module docstring); say so in train.log and
    to ``on_lines``; returns the error's words for it (failure class ``checkpoint``, titanflow.judge.failures)."""
    went = set_aside(checkpoint_folder(job) / f"step-{step}", "load-failed")
    said = (f"checkpoint: {CHECKPOINT_FOLDER}/step-{step} did not load in the ranks (every file its .metadata names is "
            f"there in full, so their bytes are wrong); set aside as {CHECKPOINT_FOLDER}/{SET_ASIDE}/{went.name}, kept")
    with contextlib.suppress(OSError), open(log_path, "a") as log:
        log.write(f"titanflow: {said}\n")
    on_lines([f"titanflow: {said}"])
    return (f"; {said}; fix: titanflow run --resume {job.run_id} goes on from the newest intact step checkpoint before "
            "it (this one is not loaded again)")


def run_training(rendered: RenderedJob, *, timeout_s: float, on_lines=lambda _: None,
                 resume: Resume | None = None, hold_nodes=None) -> TrainResult:
    """Launch from the newest complete step checkpoint (``resume``, else :func:`titanflow.launch.resume.prepare`
    now), its launch line first in train.log and to ``on_lines``; then write the run's curve to metrics.csv
    (module docstring). A NaN or infinite loss fails (a diverged model is not exported). ``hold_nodes``: for a
    Slurm job, what to hold over its nodes' hosts while it trains (:func:`launch`; the train task: their training
    slots).

    Raises:
        TrainingError: non-zero exit, timeout, no step line logged, a step of 1..steps missing from the
            log after exit 0 (message has the log tail), or a non-finite loss (torchtitan stops at one
            on the steps it logs, "Loss is not finite").
        OSError: an incomplete step checkpoint could not be removed (nothing was launched).
    """
    log_path = Path(rendered.run_dir) / "train.log"
    job = Job.read(Path(rendered.job_path))
    resume = resume or prepare(job, log_path)
    metrics_path = Path(rendered.run_dir) / "metrics.csv"
    nodes_job = job if rendered.scheduler != "local" else None
    if rendered.scheduler == "slurm":  # steps an earlier launch's job trained after its follower was killed
        recover_rank0_steps(nodes_dir(job), log_path)
    with open(log_path, "a") as log:
        log.write(resume.line + "\n")
    on_lines([resume.line])
    since, result = oom.mark(), None
    try:
        result, log_path = launch(rendered, timeout_s=timeout_s, on_lines=on_lines, hold_nodes=hold_nodes)
    finally:  # interrupted or not, the steps that ran are kept; the log file has every line the launch printed
        if result is None or result.returncode != 0:
            _room_for_the_record(job, log_path, on_lines)
        table, source = run_metrics(log_path, tb_dir(Path(job.dump_folder)))
        paths.write_atomic(metrics_path, table.to_csv(index=False), what="the run's curve")
    if result.timed_out or result.returncode != 0 or table.empty:
        why = (f"timed out after {timeout_s:.0f} s" if result.timed_out
               else f"torchrun exited {result.returncode}" if result.returncode else "no training step was logged")
        root = launch_root_cause(result, log_path, ranks_dir(rendered), nodes_job, since)
        if resume.resumed_from_step is not None and checkpoint_load_failed(root, log_path):
            why += _set_aside_unloadable(job, resume.resumed_from_step, log_path, on_lines)
        raise launch_error("train", why, result, log_path, ranks_dir(rendered), nodes_job, since, root=root)
    missing = sorted(set(range(1, job.steps + 1)) - set(table.step))
    if missing:  # exit 0 with steps unlogged: the log lost output; a curve with holes is never judged
        raise launch_error("train", f"torchrun exited 0 but steps {step_spans(missing)} of 1-{job.steps} were not "
                           "logged", result, log_path, ranks_dir(rendered), nodes_job)
    bad_steps = non_finite_steps([float(x) for x in table.loss])
    if bad_steps:
        raise TrainingError(f"train: non-finite loss at steps {bad_steps}; full log {log_path}")
    world_size = job.world_size
    per_rank_tps = _steady(table, "tps")
    return TrainResult(
        log_path=str(log_path),
        metrics_path=str(metrics_path),
        losses=[float(x) for x in table.loss],
        tokens_per_s=per_rank_tps * world_size,
        peak_memory_gib=float(table.memory_gib.max()),
        peak_rss_bytes=result.peak_rss_bytes,
        step_time_s=_finite(_steady(table, "step_time_s")),
        mfu_pct=_finite(_steady(table, "mfu_pct")),
        metrics_source=source,
        wall_s=result.wall_s,
        resumed_from_step=resume.resumed_from_step,
        attempts=resume.launch,
        set_aside=resume.set_aside,
    )
