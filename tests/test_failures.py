"""Failure classes from real logs (tests/fixtures/failure_logs/README.md says how each was made),
the retry rule of the train task, and (end to end) a planted NaN that is not retried while a
timed-out launch is."""

import json
import math
from pathlib import Path

import pytest
from prefect.states import Failed

from titanflow.failures import classify, classify_exception, matching_signature, retry_infrastructure_only

LOGS = Path(__file__).parent / "fixtures" / "failure_logs"
PASSING_RUN = Path(__file__).parent / "fixtures" / "run_folders" / "native-cpu-random"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _train_failure(log: str, why: str = "torchrun exited 1") -> dict:
    """The summary fields tasks/train.py + titanflow.summary write when torchrun fails with ``log``."""
    tail = "\n".join(log.splitlines()[-25:])
    return {"verdict": "fail", "failed_task": "train",
            "error": f"TrainingError: train: {why}; full log runs/x/train.log\n--- last lines ---\n{tail}"}


@pytest.mark.parametrize("log, evidence", [
    ("port_in_use.log", "address already in use"),
    ("sigkill.log", "SIGKILL"),
    ("cpu_oom.log", "can't allocate memory"),
])
def test_launch_port_and_memory_failures_are_infrastructure_by_their_signature(log, evidence):
    text = _log(log)
    found = matching_signature(text)
    assert found is not None and found[0] == "infrastructure"
    assert evidence.lower() in text.lower()
    assert classify(_train_failure(text), text) == "infrastructure"


def test_sigkilled_rank_is_recognised_from_the_torchrun_report():
    found = matching_signature(_log("sigkill.log"))
    # the elastic agent's first line about the rank: "failed (exitcode: -9) local_rank: 1"
    assert found == ("infrastructure", "exitcode: -9")


def test_training_watchdog_timeout_is_infrastructure():
    summary = json.loads(_log("timeout.summary.json"))
    assert summary["failed_task"] == "train" and "timed out after 8 s" in summary["error"]
    assert classify(summary, _log("timeout.train.log")) == "infrastructure"


def test_interrupted_run_is_infrastructure():
    # titanflow.summary.RunRecorder's error on Ctrl-C
    summary = {"verdict": "fail", "failed_task": "train", "error": "KeyboardInterrupt: interrupted (Ctrl-C)"}
    assert classify(summary) == "infrastructure"


def test_backend_compiler_failure_is_compile_in_warmup_or_in_training():
    text = _log("compile_backend_failed.log")
    assert matching_signature(text)[0] == "compile"
    warmup = {"verdict": "fail", "failed_task": "compile_warmup", "error": "RuntimeError: warm-up step failed"}
    assert classify(warmup, text) == "compile"
    assert classify(_train_failure(text), text) == "compile"  # torch.compile inside the training launch


def test_planted_nan_from_a_huge_learning_rate_is_numerics():
    """lr 1e6 on the tiny model: grad_norm NaN at step 2, torchtitan stops at step 3 (measured)."""
    summary = json.loads(_log("nan_lr1e6.summary.json"))
    tail = _log("nan_lr1e6.train.log")
    assert "Loss is not finite" in tail and summary["failed_task"] == "train"
    assert classify(summary, tail) == "numerics"
    # the train task's exception alone (what Prefect's retry condition sees) says the same
    assert classify_exception("train", RuntimeError(summary["error"].split(": ", 1)[1])) == "numerics"


def test_nan_in_the_recorded_losses_is_numerics_even_without_a_message():
    summary = {"verdict": "fail", "failed_task": "train", "error": "TrainingError: train: non-finite loss at steps [3]",
               "losses": [11.94, 11.93, math.nan]}
    assert classify(summary, "") == "numerics"


def test_first_step_loss_out_of_band_is_numerics(tiny_assets):
    from tasks.compare import judge
    from titanflow.expectations import random_init_first_step_loss
    from titanflow.params import Tolerances

    # 0.2 nats above the derived random-init loss: compare_loss fails the verdict, no task raises
    verdict = judge([random_init_first_step_loss(151_936, 64) + 0.2], tiny_assets.weights_dir, "random", Tolerances())
    summary = {**verdict.model_dump(), "failed_task": None, "losses": [verdict.first_step_loss]}
    assert verdict.verdict == "fail" and classify(summary, "") == "numerics"


def test_missing_key_in_the_export_is_export_validation():
    summary = {"verdict": "fail", "failed_task": "validate", "error": _log("validate_missing_key.error")}
    assert "model.norm.weight" in summary["error"]
    assert classify(summary, "") == "export_validation"


def test_passing_run_has_no_failure_class():
    summary = json.loads((PASSING_RUN / "summary.json").read_text())
    assert summary["verdict"] == "pass"
    assert classify(summary, (PASSING_RUN / "train.log").read_text()) is None


class _Task:
    name = "train"


@pytest.mark.parametrize("log, retried", [("timeout", True), ("port_in_use.log", True), ("nan_lr1e6", False),
                                          ("compile_backend_failed.log", False)])
def test_retry_condition_retries_only_infrastructure(log, retried):
    if log.endswith(".log"):
        message = _train_failure(_log(log))["error"].split(": ", 1)[1]
    else:
        message = json.loads(_log(f"{log}.summary.json"))["error"].split(": ", 1)[1]
    state = Failed(data=RuntimeError(message))  # how Prefect's task engine hands over a raised exception
    assert retry_infrastructure_only(_Task(), None, state) is retried


def _train_run_count(flow_run_id) -> int:
    """How many times the flow run's train task ran, from the Prefect API (1 = no retry)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    (train,) = [t for t in task_runs if t.name.startswith("train-")]
    return train.run_count


@pytest.mark.e2e
def test_planted_nan_fails_as_numerics_once_while_a_timed_out_launch_is_retried_twice(tmp_path):
    """The flow on a Prefect test server: lr 1e6 (NaN at step 3, measured) ends the train task after one
    run; an 8 s training timeout is infrastructure and runs it 1 + 2 retries times, then fails the run
    with its logs kept."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.scenario import qwen3_scenario
    from titanflow.history import row_from_summary

    with prefect_test_harness(server_startup_timeout=90):
        nan = qwen3_scenario(steps=4, lr=1e6, runs_dir=str(tmp_path), run_id="nan", return_state=True)
        slow = qwen3_scenario(steps=3, timeout_s=8, runs_dir=str(tmp_path), run_id="slow", return_state=True)
        counts = {"nan": _train_run_count(nan.state_details.flow_run_id),
                  "slow": _train_run_count(slow.state_details.flow_run_id)}
    assert nan.is_failed() and slow.is_failed()
    nan_row, slow_row = (row_from_summary(tmp_path / name / "summary.json") for name in ("nan", "slow"))
    assert (nan_row["failed_task"], nan_row["failure_class"]) == ("train", "numerics")
    assert (slow_row["failed_task"], slow_row["failure_class"]) == ("train", "infrastructure")
    assert counts == {"nan": 1, "slow": 3}
    # the killed run keeps its logs and publishes nothing half-written
    slow_dir = tmp_path / "slow"
    assert "timed out after 8 s" in slow_row["error"]
    assert "killed after the 8 s timeout" in (slow_dir / "train.log").read_text()
    assert not (slow_dir / "export").exists()
