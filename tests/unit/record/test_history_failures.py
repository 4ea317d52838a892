"""A history that cannot be read is loud: the run's summary, report and command line say so, its verdict
stands, nothing recorded is lost, and one command sets the table aside so the next run starts a new one."""

import shutil

import pytest
from helpers import FIXTURES

from titanflow.record import history

pytestmark = pytest.mark.fault


@pytest.fixture()
def corrupt_history(tmp_path, monkeypatch):
    folder = tmp_path / "history"
    folder.mkdir()
    shutil.copy(FIXTURES / "legacy_run" / "runs.parquet", folder / "runs.parquet")
    whole = (folder / "runs.parquet").read_bytes()
    (folder / "runs.parquet").write_bytes(whole[: len(whole) // 2])  # truncated, as by a full disk
    monkeypatch.setenv("TITANFLOW_HISTORY", str(folder))
    return folder


def test_a_truncated_table_is_named_with_the_command_that_sets_it_aside(corrupt_history):
    with pytest.raises(history.HistoryError, match=r"cannot be read .*titanflow history --set-aside"):
        history.read_history()


def test_set_aside_keeps_the_old_table_and_the_next_append_starts_a_new_one(corrupt_history, tmp_path):
    before = (corrupt_history / "runs.parquet").read_bytes()
    kept = history.set_aside()
    assert kept.name.startswith("runs.parquet.set-aside-") and kept.read_bytes() == before
    run_dir = tmp_path / "runs" / "base-native"
    shutil.copytree(FIXTURES / "legacy_run", run_dir, ignore=shutil.ignore_patterns("runs.parquet"))
    history.append_run(run_dir / "summary.json")
    assert list(history.read_history().run_id) == ["base-native"]
    assert history.set_aside(tmp_path / "empty") is None


def test_a_run_against_a_corrupt_history_says_so_and_keeps_its_verdict(corrupt_history, tmp_path, prefect_api):
    """The flow's last step (compare, append, report) on a run that passed, its history unreadable."""
    from prefect import flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from titanflow.flows.scenario import judge_against_history
    from titanflow.record.summary import RunSummary, read_summary
    from titanflow.results import LossVerdict
    from titanflow.run.recorder import RunRecorder

    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    loss = LossVerdict(first_step_loss=11.94, expected_first_step_loss=11.944, tolerance=0.15,
                       expectation_source="derived", verdict="pass", reason="|11.9400 - 11.9440| = 0.0040 <= 0.15")
    record = RunRecorder(run_dir, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=1,
                                             loss=loss))

    @flow
    def last_step():
        return str(judge_against_history(record))

    with temporary_settings({PREFECT_API_URL: prefect_api}):
        summary_path = last_step()
    summary = read_summary(summary_path)
    assert summary.verdict == "pass" and "HistoryError" in summary.history_error
    assert "titanflow history --set-aside" in summary.history_error
    # the corrupt table is left as it was, nothing renamed behind the user's back
    assert (corrupt_history / "runs.parquet").stat().st_size > 0 and not list(corrupt_history.glob("*.set-aside-*"))


def test_the_command_line_names_an_unrecorded_history(capsys):
    from titanflow.cli import print_summary
    from titanflow.record.summary import RunSummary

    print_summary(RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=1, verdict="pass",
                             history_error="HistoryError: history: runs.parquet cannot be read"))
    assert "HISTORY  not recorded: HistoryError: history: runs.parquet cannot be read" in capsys.readouterr().out


def test_a_readable_table_is_set_aside_only_with_force(tmp_path, capsys):
    """--set-aside is for a table that cannot be read: a healthy one (the legacy fixture, 1 run) is refused, left in
    place, and set aside (kept) with --force."""
    from titanflow.cli import main

    folder = tmp_path / "history"
    folder.mkdir()
    shutil.copy(FIXTURES / "legacy_run" / "runs.parquet", folder / "runs.parquet")
    before = (folder / "runs.parquet").read_bytes()
    with pytest.raises(history.ReadableHistoryError):
        history.set_aside(folder)
    assert main(["history", "--set-aside", "--history-dir", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"titanflow: bad input:\nset_aside: {folder / 'runs.parquet'} reads fine (1 run(s)); setting it aside would start "
        "the next run on an empty history. Set aside only a table that cannot be read; to start a new one anyway: "
        "titanflow history --set-aside --force (the table is kept, renamed)\n")
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["runs.parquet"]
    assert main(["history", "--force", "--history-dir", str(folder)]) == 2
    assert "force: only with --set-aside" in capsys.readouterr().err
    assert main(["history", "--set-aside", "--force", "--history-dir", str(folder)]) == 0
    (kept,) = folder.glob("runs.parquet.set-aside-*")
    assert kept.read_bytes() == before and not (folder / "runs.parquet").exists()
    assert capsys.readouterr().out == f"history: set aside as {kept}; the next run starts a new table\n"


def test_an_unreadable_table_is_set_aside_without_force(corrupt_history, capsys):
    from titanflow.cli import main

    assert main(["history", "--set-aside"]) == 0
    (kept,) = corrupt_history.glob("runs.parquet.set-aside-*")
    assert capsys.readouterr().out == f"history: set aside as {kept}; the next run starts a new table\n"


def test_titanflow_history_refuses_a_history_folder_that_is_a_file(tmp_path, monkeypatch, capsys):
    """As titanflow run, golden and prune do: a file where the history folder should be is named with the fix."""
    from titanflow.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TITANFLOW_HISTORY", str(blocker))
    assert main(["history"]) == 2
    assert capsys.readouterr().err == (f"titanflow: bad input:\nTITANFLOW_HISTORY: {blocker} is a file, not a folder; "
                                       "fix: name the history folder (the one that holds runs.parquet)\n")
    assert main(["history", "--history-dir", str(blocker)]) == 2
    assert capsys.readouterr().err.startswith(f"titanflow: bad input:\nhistory_dir: {blocker} is a file")
