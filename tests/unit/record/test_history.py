"""Run history: rows built from real run folders, a parquet table that survives appends from
concurrent processes, filtered reads, and the history folder setting."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest
from helpers import FIXTURES
from helpers.history_rows import history_row

from titanflow import paths
from titanflow.record import history

RUNS = FIXTURES / "run_folders"


@pytest.fixture()
def passing_run(tmp_path) -> Path:
    """A copy of the passing native cpu random-init run (10 steps) under tmp_path; returns its summary.json."""
    shutil.copytree(RUNS / "native-cpu-random", tmp_path / "native-cpu-random")
    return tmp_path / "native-cpu-random" / "summary.json"


def test_row_carries_the_summary_metrics_of_a_passing_run(passing_run):
    summary = json.loads(passing_run.read_text())
    row = history.row_from_summary(passing_run)
    assert (row.run_id, row.scenario, row.target, row.init) == ("native-a1", "native", "cpu", "random")
    assert row.flow_run_id == summary["flow_run_id"] and row.verdict == "pass"
    assert row.failure_class is None and row.failed_task is None
    # measured in that run (summary.json / metrics.csv)
    assert row.losses == summary["losses"] and len(row.losses) == 10
    assert row.first_step_loss == 11.94006 and row.final_loss == 11.62677
    assert row.tokens_per_s == 454.0 and row.peak_rss_bytes == 1_066_332_160 and row.peak_memory_gib == 0.99
    assert row.seconds_train == 41.505 and row.total_s == 54.541 and row.compile_warmup_s == 0.0
    assert row.nproc == 2 and row.steps == 10  # --nproc_per_node=2 in job/launch.json
    assert (row.finished_at - row.started_at).total_seconds() == pytest.approx(54.541)
    assert str(row.finished_at.tz) == "UTC"
    assert row.torch_version == metadata.version("torch") and row.prefect_version == metadata.version("prefect")
    assert row.git_commit is None or len(row.git_commit) == 40


@pytest.mark.fault
def test_row_of_a_run_whose_training_hit_nan_takes_losses_from_metrics_csv(tmp_path):
    shutil.copytree(RUNS / "native-cpu-nan", tmp_path / "nan")
    row = history.row_from_summary(tmp_path / "nan" / "summary.json")
    assert row.verdict == "fail" and row.failed_task == "train" and row.failure_class == "numerics"
    assert row.losses == [11.94006, 11.93121]  # the two steps logged before torchtitan stopped (metrics.csv)
    assert row.tokens_per_s is None and row.steps == 4


def test_append_then_read_round_trips_and_filters(passing_run, tmp_path):
    store = tmp_path / "history"
    row = history.append_run(passing_run, store)
    other = dict(row, run_id="hf-1", scenario="hf_backend", losses=[12.4, 12.3])
    history.append_rows([other], store)
    df = history.read_history(history_dir=store)
    assert list(df.run_id) == ["native-a1", "hf-1"]
    native = history.read_history(scenario="native", target="cpu", init="random", history_dir=store)
    assert list(native.run_id) == ["native-a1"] and native.losses.iloc[0] == row.losses
    assert native.peak_rss_bytes.iloc[0] == 1_066_332_160 and str(native.finished_at.dt.tz) == "UTC"
    assert pd.read_parquet(store / history.HISTORY_FILE).shape[0] == 2  # plain pandas reads the table


def test_appending_a_run_again_replaces_its_row(passing_run, tmp_path):
    history.append_run(passing_run, tmp_path)
    history.append_run(passing_run, tmp_path)
    assert len(history.read_history(history_dir=tmp_path)) == 1


def test_empty_history_reads_as_an_empty_frame(tmp_path):
    assert history.read_history(history_dir=tmp_path / "none").empty


def test_history_folder_follows_titanflow_history(monkeypatch, tmp_path):
    monkeypatch.setenv("TITANFLOW_HISTORY", str(tmp_path / "h"))
    assert history.history_file() == tmp_path / "h" / "runs.parquet"
    monkeypatch.delenv("TITANFLOW_HISTORY")
    assert paths.history_root() == paths.REPO_ROOT / "history"


def test_missing_summary_names_the_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary_path"):
        history.row_from_summary(tmp_path / "nope" / "summary.json")


_APPENDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from titanflow.record import history
    template = history.row_from_summary(Path(sys.argv[1]))
    for i in range(10):
        history.append_rows([dict(template, run_id=f"{sys.argv[2]}-{i}")], sys.argv[3])
""")


_READER = textwrap.dedent("""
    import sys, time
    from titanflow.record import history
    deadline, reads = time.monotonic() + 60, 0
    while time.monotonic() < deadline:
        n = len(history.read_history(history_dir=sys.argv[1]))  # raises on a torn read
        reads += 1
        if n == 40:
            break
    print(reads)
""")


def test_four_concurrent_processes_appending_ten_rows_each_leave_forty_rows(passing_run, tmp_path):
    """Without the lock this loses rows (measured: 10 and 19 of 40 left); pyarrow reading by path while the
    table was replaced failed with "Unexpected end of stream" (measured), hence the reader here."""
    store = tmp_path / "history"
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(store)], env=dict(os.environ),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(passing_run), f"p{n}", str(store)],
                              env=dict(os.environ), stderr=subprocess.PIPE, text=True) for n in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    df = history.read_history(history_dir=store)
    assert len(df) == 40 and df.run_id.is_unique
    assert sorted(df.run_id) == sorted(f"p{n}-{i}" for n in range(4) for i in range(10))
    assert not list(store.glob(".*.tmp"))  # no temporary sibling left behind
    assert len(pd.read_parquet(store)) == 40  # the folder reads as the table: the lock file is hidden


def test_a_table_keeps_its_column_order_when_every_row_is_replaced(tmp_path):
    """A table written in another order (an earlier titanflow's) keeps it, and a column new to it comes after."""
    row = history_row("r1", 2)
    older = {k: v for k, v in reversed(row.items()) if k != "resumes"}
    history.append_rows([older], tmp_path)
    history.append_rows([row], tmp_path)  # the same run_id: every row of the table replaced
    assert list(pd.read_parquet(tmp_path / history.HISTORY_FILE).columns) == [*older, "resumes"]


def test_every_history_column_is_filled_and_every_source_names_a_field_of_the_record(passing_run):
    assert history.source_problems() == []
    assert history.unfilled_columns(history.row_from_summary(passing_run)) == []


def test_a_misspelled_source_and_a_column_nothing_fills_are_named_with_the_fix(monkeypatch, passing_run):
    monkeypatch.delitem(history.SOURCES, "resumes")  # copied from the record: then nothing fills it
    assert history.unfilled_columns(history.row_from_summary(passing_run)) == [
        "HistoryRow.resumes: nothing fills it; fix: name it as the RunSummary field it copies, give it a \"source\" "
        "(a dotted path into the run record), or compute it in row_from_summary"]
    monkeypatch.setitem(history.SOURCES, "tokens_per_s", "train.tokens_per_sec")
    problems = history.source_problems()
    assert any(p.startswith("HistoryRow.tokens_per_s: its source 'train.tokens_per_sec' names no field "
                            "'tokens_per_sec' of TrainResult; fix: one of") for p in problems), problems
