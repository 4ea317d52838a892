"""Ctrl-C of ``titanflow run`` before the run wrote its summary (the temporary server starting, the flow's first
task): exit 130 as for any interrupted run, never 2 (bad input); a run folder left empty is removed so that its run
id can be used again, one with files is kept and named."""

from __future__ import annotations

import pytest

from titanflow import cli


def _interrupt_at_start(monkeypatch, write=None):
    def interrupted(call, imports=()):
        if write is not None:
            write()
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_with_api", interrupted)


def test_ctrl_c_before_the_flow_exits_130_and_frees_the_run_id(tmp_path, monkeypatch, capsys, tiny_assets):
    _interrupt_at_start(monkeypatch, write=lambda: (tmp_path / "e7").mkdir(exist_ok=True))  # as the flow makes it
    code = cli.main(["run", "native", "--target", "cpu", "--runs-dir", str(tmp_path), "--run-id", "e7", "--log"])
    assert code == 130
    assert not (tmp_path / "e7").exists()
    assert "interrupted before the run wrote its summary; nothing was written" in capsys.readouterr().err
    monkeypatch.undo()
    _interrupt_at_start(monkeypatch)
    # the same run id is accepted again (preflight refuses an existing folder: titanflow.run.preflight)
    assert cli.main(["run", "native", "--target", "cpu", "--runs-dir", str(tmp_path), "--run-id", "e7", "--log"]) == 130


def test_ctrl_c_before_the_summary_keeps_what_the_run_wrote(tmp_path, monkeypatch, capsys, tiny_assets):
    def write_job():
        (tmp_path / "e8" / "job").mkdir(parents=True, exist_ok=True)

    _interrupt_at_start(monkeypatch, write=write_job)
    assert cli.main(["run", "native", "--target", "cpu", "--runs-dir", str(tmp_path), "--run-id", "e8", "--log"]) == 130
    assert (tmp_path / "e8" / "job").is_dir()
    assert f"what it wrote is kept in {tmp_path / 'e8'}" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _no_api_url(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)


def test_ctrl_c_of_a_command_without_its_own_answer_exits_130_without_a_traceback(tmp_path, monkeypatch, capsys):
    # titanflow nightly and bisect run their flows through _with_api too; the flows record what ran
    _interrupt_at_start(monkeypatch)
    assert cli.main(["nightly", "--target", "cpu", "--runs-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "titanflow: interrupted (Ctrl-C); titanflow nightly stopped"
