"""Each task's peak resident set: the flow process's high-water mark, reset at the task's start, is in
summary.json (task_peak_rss_bytes) and validate's in the history row (validate_peak_rss_bytes)."""

import re
from pathlib import Path

from titanflow.record.history import row_from_summary
from titanflow.record.summary import RunSummary, read_summary
from titanflow.run.peak_rss import peak_rss_bytes, reset_peak_rss
from titanflow.run.recorder import RunRecorder
from titanflow.tasks.export import export
from titanflow.tasks.validate import validate

MIB = 2**20


def _rss_bytes() -> int:
    """Current resident set (VmRSS of /proc/self/status), bytes."""
    return int(re.search(r"^VmRSS:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024


def test_each_task_records_its_own_peak_not_an_earlier_tasks(tmp_path):
    record = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3))
    before = _rss_bytes()
    with record.task(export):
        block = b"\x01" * (256 * MIB)  # every page written: resident
        del block
    with record.task(validate):
        pass
    peaks = read_summary(record.write()).task_peak_rss_bytes
    assert list(peaks) == ["export", "validate"]
    assert peaks["export"] >= before + 248 * MIB  # the block, less what the rest of the process may give back
    # the mark was reset when validate started, after the block was freed: its peak is below by about the block
    assert peaks["validate"] <= peaks["export"] - 200 * MIB


def test_reset_brings_the_mark_down_to_the_current_resident_set():
    block = b"\x01" * (128 * MIB)
    del block
    assert reset_peak_rss()
    assert peak_rss_bytes() < _rss_bytes() + 64 * MIB  # not the freed block's mark any more


def test_validate_peak_is_a_history_column(tmp_path):
    summary = RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3,
                         task_peak_rss_bytes={"export": 5 * MIB, "validate": 7 * MIB})
    path = tmp_path / "summary.json"
    path.write_text(summary.model_dump_json())
    assert row_from_summary(path).validate_peak_rss_bytes == 7 * MIB
    older = RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3)
    path.write_text(older.model_dump_json(exclude={"task_peak_rss_bytes"}))  # a summary written before it
    assert read_summary(path).task_peak_rss_bytes == {} and row_from_summary(path).validate_peak_rss_bytes is None


def test_the_report_and_the_cli_show_the_peaks(capsys):
    from titanflow.cli import print_summary
    from titanflow.report.markdown import summary_markdown

    summary = RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3,
                         timings_s={"export": 1.0, "validate": 2.0}, task_peak_rss_bytes={"validate": 3 * 2**29},
                         slot_wait_s=88.468)
    markdown = summary_markdown(summary)
    assert "| export | 1.0 | - |" in markdown and "| validate | 2.0 | 1.50 |" in markdown  # 3 x 2**29 B = 1.5 GiB
    print_summary(summary)
    printed = capsys.readouterr().out
    assert "1.50 GiB" in printed
    assert re.search(r"training slot wait \(s\) +88\.5\n", printed)  # in no task's time, so said apart
