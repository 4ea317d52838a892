"""Failure classes from real logs (tests/fixtures/failure_logs/README.md says how each was made),
the retry rule of the train task, and (end to end) a planted NaN that is not retried while a
timed-out launch is."""

import json
import math

import pytest
from helpers import FIXTURES
from prefect.states import Failed

from titanflow.judge.failures import classify_failure, matching_signature
from titanflow.prefect_ops.stopped import classify_exception
from titanflow.record.summary import RunSummary, classify
from titanflow.tasks.retry import retry_infrastructure_only

LOGS = FIXTURES / "failure_logs"
PASSING_RUN = FIXTURES / "run_folders" / "native-cpu-random"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _fields(summary: dict, log_tail: str = "") -> str | None:
    """classify_failure of the fields a summary records (absent: None)."""
    return classify_failure(verdict=summary.get("verdict"), failed_task=summary.get("failed_task"),
                            error=summary.get("error"), losses=summary.get("losses"), log_tail=log_tail)


def _summary(name: str) -> RunSummary:
    """A summary.json fixture, read the way every reader reads it."""
    return RunSummary.model_validate_json(_log(name))


def _train_failure(log: str, why: str = "torchrun exited 1") -> dict:
    """The summary fields the train task + titanflow.run.recorder write when torchrun fails with ``log``."""
    tail = "\n".join(log.splitlines()[-25:])
    return {"verdict": "fail", "failed_task": "train",
            "error": f"TrainingError: train: {why}; full log runs/x/train.log\n--- last lines ---\n{tail}"}


@pytest.mark.fault
@pytest.mark.parametrize("log, evidence, cls", [
    ("port_in_use.log", "address already in use", "infrastructure"),
    ("sigkill.log", "SIGKILL", "infrastructure"),  # a kill of no known cause (titanflow.launch.oom found none)
    ("cpu_oom.log", "can't allocate memory", "out_of_memory"),  # the same job meets the same limit again
])
def test_launch_port_and_memory_failures_are_classed_by_their_signature(log, evidence, cls):
    text = _log(log)
    found = matching_signature(text)
    assert found is not None and found[0] == cls
    assert evidence.lower() in text.lower()
    assert _fields(_train_failure(text), text) == cls


@pytest.mark.fault
def test_sigkilled_rank_is_recognised_from_the_torchrun_report():
    found = matching_signature(_log("sigkill.log"))
    # the elastic agent's first line about the rank: "failed (exitcode: -9) local_rank: 1"
    assert found == ("infrastructure", "exitcode: -9")


@pytest.mark.fault
def test_training_watchdog_timeout_is_infrastructure():
    summary = _summary("timeout.summary.json")
    assert summary.failed_task == "train" and "timed out after 8 s" in summary.error
    assert classify(summary, _log("timeout.train.log")) == "infrastructure"


@pytest.mark.fault
def test_a_cancelled_run_has_no_failure_class_even_when_its_log_shows_a_killed_rank():
    # a Prefect cancel or Ctrl-C stops the ranks; titanflow.run.recorder records verdict "cancelled"
    text = _log("sigkill.log")
    assert matching_signature(text)[0] == "infrastructure"
    assert _fields({"verdict": "cancelled", "losses": [11.94, math.nan]}, text) is None


@pytest.mark.fault
def test_backend_compiler_failure_is_compile_in_warmup_or_in_training():
    text = _log("compile_backend_failed.log")
    assert matching_signature(text)[0] == "compile"
    warmup = {"verdict": "fail", "failed_task": "compile_warmup", "error": "RuntimeError: warm-up step failed"}
    assert _fields(warmup, text) == "compile"
    assert _fields(_train_failure(text), text) == "compile"  # torch.compile inside the training launch


@pytest.mark.fault
def test_planted_nan_from_a_huge_learning_rate_is_numerics():
    """lr 1e6 on the tiny model: grad_norm NaN at step 2, torchtitan stops at step 3 (measured)."""
    summary = _summary("nan_lr1e6.summary.json")
    tail = _log("nan_lr1e6.train.log")
    assert "Loss is not finite" in tail and summary.failed_task == "train"
    assert classify(summary, tail) == "numerics"
    # the train task's exception alone (what Prefect's retry condition sees) says the same
    assert classify_exception("train", RuntimeError(summary.error.split(": ", 1)[1])) == "numerics"


@pytest.mark.fault
def test_nan_in_the_recorded_losses_is_numerics_even_without_a_message():
    summary = {"verdict": "fail", "failed_task": "train", "error": "TrainingError: train: non-finite loss at steps [3]",
               "losses": [11.94, 11.93, math.nan]}
    assert _fields(summary, "") == "numerics"


@pytest.mark.fault
def test_first_step_loss_out_of_band_is_numerics(tiny_assets):
    from titan_cfg.model_spec import qwen3_shape
    from titanflow.judge.expected_loss import random_init_first_step_loss
    from titanflow.judge.loss import judge
    from titanflow.params import ScenarioRun

    # 0.2 nats above the derived random-init loss: compare_loss fails the verdict, no task raises
    verdict = judge([random_init_first_step_loss(151_936, 64) + 0.2], qwen3_shape(tiny_assets.weights_dir),
                    ScenarioRun())
    summary = RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=1, loss=verdict,
                         verdict=verdict.verdict)
    assert verdict.verdict == "fail" and classify(summary, "", [verdict.first_step_loss]) == "numerics"


@pytest.mark.fault
def test_missing_key_in_the_export_is_export_validation():
    summary = {"verdict": "fail", "failed_task": "validate", "error": _log("validate_missing_key.error")}
    assert "model.norm.weight" in summary["error"]
    assert _fields(summary, "") == "export_validation"


def test_passing_run_has_no_failure_class():
    summary = RunSummary.model_validate_json((PASSING_RUN / "summary.json").read_text())
    assert summary.verdict == "pass"
    assert classify(summary, (PASSING_RUN / "train.log").read_text()) is None


class _Task:
    name = "train"


@pytest.mark.fault
@pytest.mark.parametrize("log, retried", [("timeout", True), ("port_in_use.log", True), ("nan_lr1e6", False),
                                          ("compile_backend_failed.log", False)])
def test_retry_condition_retries_only_infrastructure(log, retried):
    if log.endswith(".log"):
        message = _train_failure(_log(log))["error"].split(": ", 1)[1]
    else:
        message = json.loads(_log(f"{log}.summary.json"))["error"].split(": ", 1)[1]
    state = Failed(data=RuntimeError(message))  # how Prefect's task engine hands over a raised exception
    assert retry_infrastructure_only(_Task(), None, state) is retried


@pytest.mark.fault
@pytest.mark.parametrize("task, error, cls", [
    # a Hub snapshot is checked once resolved, in render_config (titanflow.weights.check's messages)
    ("render_config", "ValueError: weights: /hub/snapshots/abc lacks model-00002-of-00002.safetensors, named by "
                      "model.safetensors.index.json; the Hugging Face cache holds a partial snapshot", "input"),
    ("render_config", "ValueError: weights: /w/model.safetensors.index.json lacks model.norm.weight", "input"),
    # titanflow.weights.resolve's refusals: an input problem, except a transient one
    ("pull_weights", "WeightsError: weights: the Hub refused org/name (HTTP 401); check the token", "input"),
    ("pull_weights", "TransientDownloadError: weights: downloading org/name failed: 503", "infrastructure"),
    ("train", "TrainingError: train: torchrun exited 1; full log x", "infrastructure"),
    # the node's baseline of the workload, read by the judge (titanflow.judge.baselines' messages): the node's own
    # state for its user to mend, not the numerics of the run
    ("compare_loss", "BaselineError: baseline: /h/baselines/native-cpu-random-k-e.json does not read as a baseline "
                     "(Expecting value: line 1 column 1 (char 0)); fix: move it aside", "input"),
    ("compare_loss", "BaselineError: history_dir: /h is a file; fix: pass the history folder", "input"),
])
def test_a_refusal_of_the_runs_input_after_the_flow_started_is_input(task, error, cls):
    assert classify_failure(verdict="fail", failed_task=task, error=error, losses=None) == cls


#: A rank's checkpoint save on a full disk, as torch's distributed checkpoint writer raises it (titanflow.launch
#: .torchrun.launch_error adds the space left in the run folder).
DISK_FULL_CAUSE = ("root cause (rank 0): OSError: [Errno 28] No space left on device (/runs/x has 4,096 bytes free; "
                   "fix: free space there, or pass --runs-dir on a larger disk)")


@pytest.mark.fault
@pytest.mark.parametrize("task, error", [
    ("train", f"TrainingError: train: torchrun exited 1; {DISK_FULL_CAUSE}; full log /runs/x/train.log"),
    # the flow's own writes (titanflow.paths.DiskFull): the curve after training, the export, the run record
    ("train", "DiskFull: [Errno 28] disk full: the run's curve could not be written to /runs/x/metrics.csv: /runs/x "
              "has 0 bytes free (ENOSPC); fix: free space there, or move the runs folder"),
    ("export", "DiskFull: [Errno 122] disk full: model-00001-of-00001.safetensors could not be written to /runs/x/"
               "export: /runs/x has 0 bytes free (EDQUOT); fix: ..."),
])
def test_a_full_disk_is_its_own_class_and_never_retried(task, error):
    assert _fields({"verdict": "fail", "failed_task": task, "error": error}) == "disk_full"

    class _Failed:
        name = task

    state = Failed(data=RuntimeError(error.split(": ", 1)[1]))
    assert retry_infrastructure_only(_Failed(), None, state) is False


#: The kernel's record of an out-of-memory kill, as dmesg printed it on this machine for a process in a memory cgroup
#: of 200 MiB (tests/unit/launch/test_oom.py has the whole line).
KERNEL_OOM = ("[12636.707347] Memory cgroup out of memory: Killed process 7968 (python3) total-vm:426168kB, "
              "anon-rss:204288kB, file-rss:6520kB, shmem-rss:0kB, UID:0 pgtables:468kB oom_score_adj:0")


@pytest.mark.fault
def test_a_rank_the_out_of_memory_killer_ended_is_out_of_memory_and_never_retried():
    """torchrun's SIGKILL of rank 1, explained by the kernel's record of that pid (titanflow.launch.oom): class
    out_of_memory, not retried; the same SIGKILL with no such record stays infrastructure and is retried."""
    from titanflow.launch.oom import LaunchMark, explain

    killed = "Signal 9 (SIGKILL) received by PID 7968"
    since = LaunchMark(uptime_s=12600.0, cgroup_oom_kills=None)
    cause = explain(killed, since, log=KERNEL_OOM, kills_now=None)
    assert cause.startswith(f"{killed}: killed by the kernel's out-of-memory killer at a resident set of 0.19 GiB")
    assert "fix: a smaller --global-batch-size or --seq-len, or more ranks" in cause
    for message, cls, retried in [(cause, "out_of_memory", False), (killed, "infrastructure", True)]:
        error = f"train: torchrun exited 1; root cause (rank 1): {message}; full log /runs/x/train.log"
        assert _fields({"verdict": "fail", "failed_task": "train", "error": f"TrainingError: {error}"}) == cls
        assert retry_infrastructure_only(_Task(), None, Failed(data=RuntimeError(error))) is retried
