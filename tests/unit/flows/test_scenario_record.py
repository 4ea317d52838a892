"""titanflow.flows.scenario.write_record: a run folder too full for summary.json even after its space reserve. The
run's record goes to the history (its row: verdict, failure class) and into the error the flow run ends with; the
summary.json written before keeps what it held."""

from __future__ import annotations

import errno
import shutil

import pytest
from helpers import FIXTURES

from titanflow.flows.scenario import RecordNotWritten, write_record
from titanflow.paths import disk_full
from titanflow.record.history import read_history
from titanflow.record.summary import read_summary
from titanflow.run import recorder
from titanflow.run.recorder import RunRecorder
from titanflow.task_names import TaskName


def test_a_record_the_full_run_folder_cannot_hold_goes_to_the_history_and_the_error(prefect_api, tmp_path, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    run_dir = tmp_path / "full"
    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-random", run_dir)
    before = (run_dir / "summary.json").read_bytes()
    summary = read_summary(run_dir / "summary.json").model_copy(update={
        "run_id": "full", "failed_task": TaskName.train, "loss": None, "export": None,
        "error": "TrainingError: root cause (rank 0): OSError: [Errno 28] No space left on device"})
    record = RunRecorder(run_dir, summary)
    record._reserved = True  # its reserve made at the start and given up since

    def full(path, data, what=None):
        raise disk_full(OSError(errno.ENOSPC, "No space left on device"), path, what or path.name)

    monkeypatch.setattr(recorder, "write_atomic", full)
    monkeypatch.setenv("TITANFLOW_HISTORY", str(tmp_path / "history"))
    with temporary_settings({PREFECT_API_URL: prefect_api}), pytest.raises(RecordNotWritten) as raised:
        write_record(record)
    message = str(raised.value)
    assert message.startswith("[Errno 28] disk full: the run record could not be written to ")
    assert (f"; the run ended fail: {record.summary.reason}; its record is in the history "
            f"({tmp_path / 'history' / 'runs.parquet'}), not {run_dir / 'summary.json'}") in message
    (row,) = read_history(history_dir=tmp_path / "history").itertuples()
    assert (row.run_id, row.verdict, row.failure_class, row.failed_task) == ("full", "fail", "disk_full", "train")
    assert (run_dir / "summary.json").read_bytes() == before  # the record written before is kept as it was
