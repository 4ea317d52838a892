"""A cancelled or interrupted run is recorded as cancelled, never as a failure: the run record
(titanflow.record.summary), its verdict, its history row, the regression baselines, the report and the
command line. The deployment run that `prefect flow-run cancel` stops is in tests/e2e/test_failure_runs.py.

The run folder is a copy of ``tests/fixtures/run_folders/native-cpu-random`` (a real 10-step run) whose
metrics.csv is cut to its first 3 steps, as titanflow.launch.torchrun leaves it when training is stopped
after 3 logged steps; those losses (11.94006, 11.93394, 11.89889) are that run's.
"""

import asyncio
import json
import shutil
import signal

import pandas as pd
import pytest
from helpers import FIXTURES
from prefect.exceptions import CancelledRun, TerminationSignal
from prefect.states import Failed

from titanflow.judge.regression import evaluate
from titanflow.judge.verdict import final_verdict
from titanflow.prefect_ops.stopped import cancel_cause, classify_exception
from titanflow.record import history
from titanflow.record.summary import RunSummary, classify, read_summary
from titanflow.report.markdown import summary_markdown
from titanflow.run.recorder import RunRecorder
from titanflow.tasks.retry import retry_infrastructure_only
from titanflow.tasks.train import train
from titanflow.tasks.validate import validate

pytestmark = pytest.mark.fault

#: The first three steps of the fixture run (its metrics.csv).
LOGGED = [11.94006, 11.93394, 11.89889]


@pytest.fixture()
def stopped_run(tmp_path):
    """The fixture run's folder with metrics.csv holding its first 3 steps, and a recorder for it."""
    run_dir = tmp_path / "native-a1"
    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-random", run_dir)
    (run_dir / "summary.json").unlink()
    metrics = pd.read_csv(run_dir / "metrics.csv")
    metrics.head(3).to_csv(run_dir / "metrics.csv", index=False)
    fixture = read_summary(FIXTURES / "run_folders" / "native-cpu-random" / "summary.json")
    return RunRecorder(run_dir, RunSummary(run_id="native-a1", scenario="native", target="cpu", init="random",
                                           steps=10, parameters=fixture.parameters))


def _cancel_in_train(record: RunRecorder, err: BaseException) -> RunSummary:
    with pytest.raises(type(err)), record.task(train):
        raise err
    return read_summary(record.write())


class _LibraryCancel(asyncio.CancelledError):
    """A library's own cancellation error that subclasses asyncio's, as Prefect's internal one does."""


@pytest.mark.parametrize("err, cause", [
    (TerminationSignal(signal.SIGTERM), "cancelled (SIGTERM: a Prefect cancel, or the process was told to stop)"),
    (KeyboardInterrupt(), "interrupted (Ctrl-C)"),
    (asyncio.CancelledError(), "cancelled (asyncio cancellation)"),
    (_LibraryCancel(), "cancelled (asyncio cancellation)"),  # as Prefect's own, an asyncio one
    (CancelledRun("Run is in CANCELLED state."), "cancelled (Run is in CANCELLED state.)"),
    (RuntimeError("train: torchrun exited 1"), None),
    (TimeoutError("timed out after 8 s"), None),
])
def test_cancel_cause_names_each_way_a_run_is_stopped_from_outside(err, cause):
    assert cancel_cause(err) == cause


def test_a_prefect_cancel_during_training_is_recorded_as_cancelled_with_the_logged_steps(stopped_run):
    summary = _cancel_in_train(stopped_run, TerminationSignal(signal.SIGTERM))
    assert summary.verdict == "cancelled"
    assert summary.cancelled.task == "train" and summary.cancelled.losses == LOGGED
    assert summary.losses == LOGGED  # what every reader of a summary takes as the run's losses
    assert (summary.failed_task, summary.error) == (None, None)  # nothing failed
    assert summary.reason == ("cancelled (SIGTERM: a Prefect cancel, or the process was told to stop) in train "
                              "after 3 logged step(s)")
    assert set(summary.timings_s) == {"train"}
    assert classify(summary, (stopped_run.run_dir / "train.log").read_text()) is None


def test_ctrl_c_is_recorded_as_cancelled_interrupted(stopped_run):
    summary = _cancel_in_train(stopped_run, KeyboardInterrupt())
    assert (summary.verdict, summary.cancelled.cause) == ("cancelled", "interrupted (Ctrl-C)")
    assert summary.cancelled.losses == LOGGED


def test_a_cancel_between_tasks_is_recorded_without_a_task(stopped_run):
    assert stopped_run.cancelled_by(TerminationSignal(signal.SIGTERM)) is True
    summary = read_summary(stopped_run.write())
    assert summary.verdict == "cancelled" and summary.cancelled.task is None
    assert summary.reason.endswith("between tasks after 3 logged step(s)")


def test_the_first_cancel_recorded_stands(stopped_run):
    # record.task records the cancel in its task; the flow's own guard then sees the same exception again
    err = TerminationSignal(signal.SIGTERM)
    _cancel_in_train(stopped_run, err)
    assert stopped_run.cancelled_by(err) is True
    assert read_summary(stopped_run.write()).cancelled.task == "train"


def test_a_failure_is_still_a_failure(stopped_run):
    with pytest.raises(RuntimeError), stopped_run.task(validate):
        raise RuntimeError("validate: missing keys ['model.norm.weight']")
    summary = read_summary(stopped_run.write())
    assert (summary.verdict, summary.failed_task, summary.cancelled) == ("fail", "validate", None)
    assert stopped_run.cancelled_by(RuntimeError("x")) is False


def test_a_cancel_before_any_step_records_no_loss(tmp_path):
    record = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3))
    summary = _cancel_in_train(record, TerminationSignal(signal.SIGTERM))  # no metrics.csv yet
    assert summary.verdict == "cancelled" and summary.cancelled.losses == [] and summary.losses == []


def test_cancelled_outranks_everything_else_in_the_verdict():
    assert final_verdict("train", None, [], "interrupted (Ctrl-C) in train after 0 logged step(s)") == (
        "cancelled", "interrupted (Ctrl-C) in train after 0 logged step(s)")


def test_a_cancel_is_never_retried_as_infrastructure():
    # CancelledRun is an Exception: a task raising it ends Failed, and Prefect asks the retry condition
    assert classify_exception("train", CancelledRun("Run is in CANCELLED state.")) is None
    assert retry_infrastructure_only(train, None, Failed(data=CancelledRun("Run is in CANCELLED state."))) is False
    assert classify_exception("train", TerminationSignal(signal.SIGTERM)) is None


def test_the_history_row_of_a_cancelled_run_says_cancelled_with_no_class(stopped_run, tmp_path):
    _cancel_in_train(stopped_run, TerminationSignal(signal.SIGTERM))
    # an earlier run already in the table stays as it was
    earlier = tmp_path / "earlier"
    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-nan", earlier)
    history.append_run(earlier / "summary.json", tmp_path / "history")
    before = history.read_history(history_dir=tmp_path / "history")
    row = history.append_run(stopped_run.path, tmp_path / "history")
    assert (row.verdict, row.failure_class, row.failed_task, row.error) == ("cancelled", None, None, None)
    assert row.losses == LOGGED and row.first_step_loss == 11.94006 and row.final_loss == 11.89889
    assert row.reason.startswith("cancelled (SIGTERM") and "in train after 3 logged step(s)" in row.reason
    table = history.read_history(history_dir=tmp_path / "history")
    assert list(before.run_id) == ["native-nan2"] and list(table.run_id) == ["native-nan2", "native-a1"]
    kept = table[table.run_id == "native-nan2"]
    assert _records(kept) == _records(before)


def _records(table: pd.DataFrame) -> list[dict]:
    """The rows as JSON values: a missing value reads None whether its column is object or string."""
    return json.loads(table.to_json(orient="records", date_format="iso"))


def _past(verdict: str, day: int, tokens_per_s: float) -> dict:
    """A native cpu random-init history row (config "k10") that finished on ``day``."""
    return {"run_id": f"{verdict}-{day}", "scenario": "native", "target": "cpu", "init": "random",
            "config_key": "k10", "verdict": verdict, "finished_at": pd.Timestamp(f"2026-11-{day:02d} 02:00", tz="UTC"),
            "losses": LOGGED, "tokens_per_s": tokens_per_s, "peak_memory_gib": 1.0, "peak_rss_bytes": 2**30,
            "total_s": 60.0, "seconds_train": 40.0}


def test_cancelled_rows_are_never_a_baseline():
    now = _past("pass", 20, 500.0) | {"run_id": "now"}
    # three passing runs at 500 tokens/s, and cancelled ones at 1 tokens/s (stopped in mid-step)
    past = pd.DataFrame([_past("pass", 1, 500.0), _past("cancelled", 2, 1.0), _past("pass", 3, 500.0),
                         _past("cancelled", 4, 1.0), _past("pass", 5, 500.0)])
    finding = {f.metric: f for f in evaluate(now, past)}["tokens_per_s"]
    assert (finding.baseline, finding.status) == (500.0, "pass")
    only_cancelled = pd.DataFrame([_past("cancelled", d, 500.0) for d in range(1, 6)])
    assert {f.metric: f for f in evaluate(now, only_cancelled)}["tokens_per_s"].status == "no baseline"


def test_the_report_says_cancelled_where_and_after_how_many_steps(stopped_run):
    summary = _cancel_in_train(stopped_run, TerminationSignal(signal.SIGTERM))
    markdown = summary_markdown(summary, log="[rank0]: step: 3 ...\nSIGTERM received")
    assert markdown.startswith("# native on cpu (random init): CANCELLED")
    assert ("- **cancelled** in task `train` after 3 logged step(s) of 10: cancelled (SIGTERM: a Prefect cancel, "
            "or the process was told to stop); not a failure, no failure class") in markdown
    assert "failed task" not in markdown and "SIGTERM received" in markdown  # the log tail is shown


def test_the_command_line_prints_the_cancel(stopped_run, capsys):
    from titanflow.cli import print_summary

    print_summary(_cancel_in_train(stopped_run, KeyboardInterrupt()))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["run", "native-a1"], ["verdict", "cancelled"]]
    assert any(line.startswith("cancelled") and line.endswith("interrupted (Ctrl-C) in train after 3 logged step(s)")
               for line in lines)


def test_a_cancelled_summary_round_trips(stopped_run):
    summary = _cancel_in_train(stopped_run, TerminationSignal(signal.SIGTERM))
    raw = json.loads(stopped_run.path.read_text())
    assert raw["verdict"] == "cancelled" and raw["cancelled"]["losses"] == LOGGED and raw["cancelled"]["task"] == "train"
    assert RunSummary.model_validate_json(stopped_run.path.read_text()) == summary


def test_ctrl_c_of_titanflow_run_says_cancelled_and_exits_130(tmp_path, monkeypatch, capsys, tiny_assets):
    from titanflow import cli

    def interrupted_flow(call, imports=()):
        """What _with_api returns after Ctrl-C: the flow wrote its summary (cancelled in train), no state."""
        run_dir = tmp_path / "runs" / "ctrl-c"
        run_dir.mkdir(parents=True)
        record = RunRecorder(run_dir, RunSummary(run_id="ctrl-c", flow_run_id="f-1", scenario="native", target="cpu",
                                                 init="random", steps=10))
        with pytest.raises(KeyboardInterrupt), record.task(train):
            raise KeyboardInterrupt
        record.write()
        return True, None

    monkeypatch.setattr(cli, "_with_api", interrupted_flow)
    assert cli.main(["run", "native", "--target", "cpu", "--runs-dir", str(tmp_path / "runs"),
                     "--run-id", "ctrl-c"]) == 130
    out = capsys.readouterr().out
    assert "prefect flow run f-1: interrupted (Ctrl-C); run cancelled, not failed\n" in out
    assert ["verdict", "cancelled"] in [line.split() for line in out.splitlines()]
