"""The files' schema_version: summary.json and the history's tables are written in the current version, files of
version 1 (no schema_version: every file written before it, tests/fixtures/legacy_run) read as the current one
through titanflow.record.schema alone, and a file of a newer version is refused, naming both versions."""

import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES
from helpers.history_rows import history_row
from pydantic import ValidationError

from titanflow.record import history, schema
from titanflow.record.summary import RunSummary, read_summary
from titanflow.run.recorder import RunRecorder

LEGACY = FIXTURES / "legacy_run"  # summary.json and runs.parquet of version 1 (written at commit 19412d4)


def test_a_version_1_summary_is_upgraded_step_by_step_and_the_file_given_is_left_as_it_was():
    raw = json.loads((LEGACY / "summary.json").read_text())
    assert "schema_version" not in raw and "losses" in raw and "missing_in_files" in raw["validation"]
    upgraded = schema.upgrade_summary(raw)
    assert upgraded["schema_version"] == schema.SUMMARY_VERSION == 2
    assert upgraded["train"]["losses"] == raw["losses"] and "losses" not in upgraded
    assert upgraded["export"] == {"export_dir": raw["export_dir"], "untied_lm_head": False}
    assert upgraded["loss"]["first_step_loss"] == raw["first_step_loss"] and upgraded["loss"]["verdict"] == "pass"
    assert upgraded["validation"]["load"]["missing_in_files"] == ["lm_head.weight"]
    assert "missing_in_files" not in upgraded["validation"] and "regressions" not in upgraded
    assert "losses" in raw and "schema_version" not in raw  # the dict given is not changed
    assert read_summary(LEGACY / "summary.json").schema_version == 2


def test_a_new_summary_is_written_with_the_current_version(tmp_path):
    path = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random",
                                            steps=3)).write()
    written = json.loads(path.read_text())
    assert written["schema_version"] == schema.SUMMARY_VERSION and next(iter(written)) == "schema_version"
    assert schema.upgrade_summary(written) == written  # the current version needs no step


@pytest.mark.parametrize("version", [schema.SUMMARY_VERSION + 1, 0, "2"])
def test_a_summary_of_a_newer_or_no_version_is_refused_naming_the_field(tmp_path, version):
    data = json.loads((LEGACY / "summary.json").read_text()) | {"schema_version": version}
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ValidationError, match="schema_version: "):
        read_summary(tmp_path / "summary.json")


def test_the_history_is_written_with_its_version_in_the_tables_metadata(tmp_path):
    table = history.append_rows([history_row("r1", 2)], tmp_path)
    assert pd.read_parquet(table).attrs == {"schema_version": schema.HISTORY_VERSION}
    assert json.loads(pq.read_schema(table).metadata[b"PANDAS_ATTRS"]) == {"schema_version": 2}
    assert history.read_history(history_dir=tmp_path).attrs["schema_version"] == 2


def test_a_version_1_history_table_reads_as_the_current_one_and_is_written_so_on_its_next_append(tmp_path):
    shutil.copy(LEGACY / "runs.parquet", tmp_path / history.HISTORY_FILE)
    assert pd.read_parquet(tmp_path / history.HISTORY_FILE).attrs == {}  # version 1: no mark
    old = history.read_history(history_dir=tmp_path)
    assert old.attrs["schema_version"] == 2 and list(old.run_id) == ["base-native"]
    history.append_rows([dict(old.iloc[0], run_id="again")], tmp_path)
    again = pd.read_parquet(tmp_path / history.HISTORY_FILE)
    assert again.attrs == {"schema_version": 2} and list(again.run_id) == ["base-native", "again"]


def test_a_history_table_of_a_newer_version_is_refused_and_never_set_aside(tmp_path):
    newer = pd.read_parquet(LEGACY / "runs.parquet")
    newer.attrs = {"schema_version": schema.HISTORY_VERSION + 1}
    newer.to_parquet(tmp_path / history.HISTORY_FILE, index=False)
    with pytest.raises(history.NewerHistoryError, match=r"schema_version: .*runs.parquet is version 3, newer than "
                                                        r"this titanflow reads \(2\)"):
        history.read_history(history_dir=tmp_path)
    with pytest.raises(history.NewerHistoryError):
        history.set_aside(tmp_path)
    assert (tmp_path / history.HISTORY_FILE).is_file()


def test_the_world_size_of_run_folders_of_every_version(tmp_path):
    assert schema.world_size(LEGACY, {}) == 2  # its job.json has no world_size: --nproc_per_node=2 of launch.json
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.json").write_text(json.dumps({"world_size": 4}))
    assert schema.world_size(tmp_path, {"nproc": 1}) == 4
    assert schema.world_size(tmp_path / "no-job", {"nproc": 1}) == 1  # before runs had nodes: one node's ranks
    assert schema.world_size(tmp_path / "no-job", {"nproc_per_node": 1}) is None
