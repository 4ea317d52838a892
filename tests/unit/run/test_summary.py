"""The typed run record: summaries and a history table written before the record was typed are still
read, and a new summary round-trips.

``tests/fixtures/legacy_run/`` is a real run of the previous layout: ``titanflow run native --target cpu``
(10 steps, 2 ranks) at commit 19412d4, its summary.json, job files, metrics.csv, the end of its
train.log, and the history table that run appended (runs.parquet). Every expected value below is
read off those files.
"""

import json
import shutil

import pandas as pd
import pytest
from helpers import FIXTURES

from titanflow.judge.verdict import final_verdict
from titanflow.record import history
from titanflow.record.summary import RunSummary, read_summary
from titanflow.results import Finding, LossVerdict
from titanflow.run.recorder import RunRecorder
from titanflow.tasks.train import train

LEGACY = FIXTURES / "legacy_run"
LEGACY_LOSSES = [11.94006, 11.93394, 11.89889, 11.85279, 11.8061, 11.71372, 11.69535, 11.65731, 11.63609, 11.62677]


def test_a_summary_of_the_previous_layout_reads_as_a_typed_run_summary():
    raw = json.loads((LEGACY / "summary.json").read_text())
    summary = read_summary(LEGACY / "summary.json")
    assert (summary.run_id, summary.scenario, summary.target, summary.init, summary.steps) == (
        "base-native", "native", "cpu", "random", 10)
    assert summary.losses == raw["losses"] == LEGACY_LOSSES
    assert (summary.train.tokens_per_s, summary.train.peak_rss_bytes, summary.train.peak_memory_gib) == (
        602.0, 1_094_877_184, 1.02)
    assert summary.export.export_dir == raw["export_dir"] and summary.export.untied_lm_head is False
    assert summary.loss.first_step_loss == 11.94006 and summary.loss.tolerance == 0.15
    assert summary.loss.expected_first_step_loss == raw["expected_first_step_loss"]
    assert (summary.verdict, summary.reason, summary.failed_task) == ("pass", raw["reason"], None)
    # the load level, flat in that layout, is its own part now
    assert summary.validation.load.missing_in_files == ["lm_head.weight"] and summary.validation.load.tied
    assert summary.validation.parity.kl == 0.0 and summary.validation.round_trip.tensors == 24
    assert summary.validation.problems == [] and summary.validation.load.problems == []
    assert len(summary.findings) == 12 and summary.regressions == []
    assert summary.total_s == raw["total_s"] == 67.198
    assert summary.compile_warmup.status == "skipped"


def test_a_history_table_of_the_previous_layout_is_read_and_appended_to(tmp_path, monkeypatch):
    shutil.copy(LEGACY / "runs.parquet", tmp_path / "runs.parquet")
    old = history.read_history(history_dir=tmp_path)
    assert list(old.run_id) == ["base-native"] and old.losses.iloc[0] == LEGACY_LOSSES
    # the same run, appended again by this code from its summary: the row replaces the old one, and
    # every column the previous code wrote is there with the same value (times and run folder aside)
    run_dir = tmp_path / "runs" / "base-native"
    shutil.copytree(LEGACY, run_dir, ignore=shutil.ignore_patterns("runs.parquet"))
    row = history.append_run(run_dir / "summary.json", tmp_path)
    table = pd.read_parquet(tmp_path / "runs.parquet")
    # the same columns in the same order, and the columns added since after them: the rest of the row's
    legacy_columns = list(pd.read_parquet(LEGACY / "runs.parquet").columns)
    assert list(table.columns)[:len(legacy_columns)] == legacy_columns
    assert sorted(table.columns) == sorted(row.as_record())
    legacy = pd.read_parquet(LEGACY / "runs.parquet").iloc[0]
    same = [c for c in legacy.index if c not in ("started_at", "finished_at", "run_dir", "git_commit", "git_dirty",
                                                 "torch_version", "torchtitan_version", "transformers_version",
                                                 "prefect_version", "losses")]
    assert {c: table.iloc[0][c] for c in same} == {c: legacy[c] for c in same}
    assert list(table.losses.iloc[0]) == LEGACY_LOSSES
    assert row.nproc == 2  # --nproc_per_node=2 of the old job/launch.json: that job.json has no world_size


def test_a_new_summary_round_trips_and_records_the_failed_task(tmp_path):
    record = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3))
    with pytest.raises(RuntimeError), record.task(train):
        raise RuntimeError("train: torchrun exited 1")
    path = record.write()
    summary = read_summary(path)
    assert summary == record.summary
    assert (summary.failed_task, summary.error, summary.verdict) == ("train", "RuntimeError: train: torchrun exited 1",
                                                                     "fail")
    assert set(summary.timings_s) == {"train"} and summary.started_at <= summary.finished_at
    assert json.loads(path.read_text())["total_s"] == summary.total_s


_PASS = LossVerdict(first_step_loss=11.94, expected_first_step_loss=11.944, tolerance=0.15,
                    expectation_source="derived", verdict="pass", reason="|11.9400 - 11.9440| = 0.0040 <= 0.15")


def _finding(finding_class: str, passed: bool | None, status: str | None = None) -> Finding:
    return Finding(metric="losses" if finding_class == "numerics" else "tokens_per_s", value=1.0, baseline=2.0,
                   margin=0.02, passed=passed, status=status or ("fail" if passed is False else "pass"),
                   finding_class=finding_class, detail="step 3: ...")


@pytest.mark.parametrize("failed_task, loss, findings, expected", [
    (None, None, [], (None, None)),                                  # nothing judged yet
    ("train", None, [], ("fail", None)),                             # a task raised: its error says why
    (None, _PASS, [], ("pass", _PASS.reason)),
    (None, _PASS.model_copy(update={"verdict": "fail", "reason": "off"}), [], ("fail", "off")),
    (None, _PASS, [_finding("performance", False, "flagged")], ("pass", _PASS.reason)),  # flagged, not failed
    (None, _PASS, [_finding("performance", False)], ("fail", "performance regression: tokens_per_s step 3: ...")),
    (None, _PASS, [_finding("performance", False), _finding("numerics", False)],
     ("fail", "loss curve regression: losses step 3: ...")),
    (None, _PASS, [_finding("numerics", True)], ("pass", _PASS.reason)),
    (None, _PASS, [_finding("numerics", False)], ("fail", "loss curve regression: losses step 3: ...")),
])
def test_final_verdict(failed_task, loss, findings, expected):
    assert final_verdict(failed_task, loss, findings) == expected


@pytest.mark.fault
def test_the_first_non_finite_step_is_named_from_the_losses_or_torchtitans_stop():
    """torchtitan raises before logging a non-finite step, so a crashed run names it from the root
    cause line (the ranks_nan fixture's message); a judged run from its losses."""
    base = {"run_id": "r", "scenario": "native", "target": "cpu", "init": "random", "steps": 5}
    stopped = RunSummary(**base, failed_task="train", error="TrainingError: root cause (rank 0): RuntimeError: "
                         "Loss is not finite (global_avg_loss=nan) at step 3. Stopping training.")
    assert stopped.first_non_finite_step == 3
    assert stopped.model_dump(mode="json")["first_non_finite_step"] == 3
    finite = RunSummary(**base, error="TrainingError: something else at step 4")
    assert finite.first_non_finite_step is None
