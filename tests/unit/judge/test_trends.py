"""Trends: the last nights of each scenario x init from a history built by hand (HistoryRow records written
with titanflow.record.history.append_rows and read back), regressions marked, as a table, a PNG and text.

The history: native and moe on cpu, random init, nights 2026-12-01 to -06, the nightly's workload "k10":
- native: tokens/s 600, 610, then night 3 a failed run (infrastructure) at 02:00 and a passing rerun (590)
  at 14:00, 600, 300 (night 5: 300 against the median 600 of the 4 passing runs before it is -50 %, past the -5 %
  of regression_rules.toml and its noise floor of 250 tokens/s: flagged, 1 of 2), 600 (median of 600, 610, 590,
  600, 300: 600, within);
- moe: peak memory 2.0 GiB three nights, 2.5 on night 4 (+25 % against the median 2.0, past +10 % and the 0.15 GiB
  noise floor: flagged, 1 of 2),
  night 5 failed (numerics);
- beside them a run by hand of native with another workload ("k3") and one trn2 run, both left out
  when the table is asked for the nightly's workload on cpu.
"""

from __future__ import annotations

import datetime

import pandas as pd
import pytest
from helpers.history_rows import history_row

from titanflow.judge.trends import trend_table
from titanflow.record.history import append_rows, read_history
from titanflow.report.trends import (
    CELL_IN,
    DPI,
    trend_text,
    trends_markdown,
    write_trends_png,
)

MOE_LOSSES = [12.01, 11.9, 11.8]


@pytest.fixture()
def runs(tmp_path) -> pd.DataFrame:
    rows = [
        history_row("n1", 1), history_row("n2", 2, tokens_per_s=610.0),
        history_row("n3a", 3, verdict="fail", failure_class="infrastructure", losses=[], tokens_per_s=None,
                    peak_memory_gib=None, total_s=10.0),
        history_row("n3b", 3, hour=14, tokens_per_s=590.0), history_row("n4", 4), history_row("n5", 5, tokens_per_s=300.0),
        history_row("n6", 6),
        *[history_row(f"m{d}", d, scenario="moe", losses=MOE_LOSSES, tokens_per_s=300.0, peak_memory_gib=2.0)
          for d in (1, 2, 3)],
        history_row("m4", 4, scenario="moe", losses=MOE_LOSSES, tokens_per_s=300.0, peak_memory_gib=2.5),
        history_row("m5", 5, scenario="moe", losses=[12.01, 12.3, 12.5], tokens_per_s=300.0, peak_memory_gib=2.0,
                    verdict="fail", failure_class="numerics"),
        history_row("manual", 4, hour=10, config_key="k3", losses=[11.94006, 11.93394, 11.89889]),
        history_row("t1", 5, target="trn2"),
    ]
    append_rows(rows, tmp_path / "history")
    return read_history(history_dir=tmp_path / "history")


def _night(table: pd.DataFrame, scenario: str, day: int) -> pd.Series:
    (row,) = [r for _, r in table.iterrows() if r.scenario == scenario and r.night == datetime.date(2026, 12, day)]
    return row


def test_each_night_of_the_nightly_workload_with_its_regressions_marked(runs):
    table = trend_table(runs, target="cpu", workloads=["k10"])
    assert [(r.scenario, r.night.day) for _, r in table.iterrows()] == \
        [("moe", d) for d in range(1, 6)] + [("native", d) for d in range(1, 7)]
    assert list(table.run_id[table.scenario == "native"]) == ["n1", "n2", "n3b", "n4", "n5", "n6"]
    marks = {(r.scenario, r.night.day): r.regressions for _, r in table.iterrows() if r.regressions}
    assert marks == {("native", 3): "fail: infrastructure", ("native", 5): "tokens_per_s -50% (1 of 2)",
                     ("moe", 4): "peak_memory_gib +25% (1 of 2)", ("moe", 5): "fail: numerics"}
    assert _night(table, "native", 5).regressed == ["tokens_per_s"]
    assert _night(table, "moe", 4).regressed == ["peak_memory_gib"]
    assert _night(table, "moe", 5).regressed == []  # a failed run marks its night, not a metric
    night3 = _night(table, "native", 3)  # the last run of the night shown, the failed one counted and marked
    assert (night3.run_id, night3.runs, night3.failed_runs, night3.verdict, night3.tokens_per_s) == \
        ("n3b", 2, 1, "pass", 590.0)
    assert list(table.failed_runs) == [0, 0, 0, 0, 1] + [0, 0, 1, 0, 0, 0]  # moe night 5, native night 3
    m5 = _night(table, "moe", 5)
    assert (m5.first_step_loss, m5.final_loss, m5.peak_memory_gib, m5.total_s) == (12.01, 12.5, 2.0, 60.0)


def test_the_last_nights_only_and_each_workload_apart(runs):
    last3 = trend_table(runs, target="cpu", workloads=["k10"], nights=3)
    assert [r.night.day for _, r in last3[last3.scenario == "native"].iterrows()] == [4, 5, 6]
    assert [r.night.day for _, r in last3[last3.scenario == "moe"].iterrows()] == [3, 4, 5]
    every = trend_table(runs)
    assert sorted(set(zip(every.target, every.scenario, every.workload))) == \
        [("cpu", "moe", "k10"), ("cpu", "native", "k10"), ("cpu", "native", "k3"), ("trn2", "native", "k10")]
    with pytest.raises(ValueError, match="nights: 0; fix: pass at least 1"):
        trend_table(runs, nights=0)


def test_trends_png_is_one_row_of_small_plots_per_scenario(runs, tmp_path):
    table = trend_table(runs, target="cpu", workloads=["k10"])
    path = write_trends_png(table, tmp_path / "trends-cpu.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    # 5 metrics x 2.3 in wide, 2 scenario x init x 1.45 in tall plus 0.7 in for the legend, at 80 dpi
    assert (width, height) == (round(5 * CELL_IN[0] * DPI), round((2 * CELL_IN[1] + 0.7) * DPI)) == (920, 288)
    assert len(data) < 150_000  # inlined in the markdown artifact


def test_text_and_markdown_mark_the_regressed_values(runs, tmp_path):
    table = trend_table(runs, target="cpu", workloads=["k10"])
    text = trend_text(table)
    (line,) = [x for x in text.splitlines() if " n5 " in f" {x} "]
    assert "300*" in line and "tokens_per_s -50% (1 of 2)" in line
    assert "n3b (+1)" in text  # two runs that night
    markdown = trends_markdown("cpu", table, None, 14)
    assert markdown.startswith("# trends on cpu: the last 14 nights\n")
    assert "6 nights, 2 scenario x init; 4 night(s) with a regression or a failure marked." in markdown
    assert "| **300** |" in markdown and "| **2.5** |" in markdown
    assert trends_markdown("cpu", table.iloc[0:0], None, 14).endswith("No run of this target in the history yet.\n")


def test_history_last_prints_the_same_table(runs, tmp_path, capsys):
    from titanflow.cli import main

    assert main(["history", "--history-dir", str(tmp_path / "history"), "--last", "2", "--target", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"history: {tmp_path / 'history' / 'runs.parquet'}, 14 run(s)"
    assert out[1].split() == ["scenario", "init", "workload", "night", "run", "verdict", "first", "loss", "final",
                              "loss", "tokens/s", "peak", "GiB", "total", "s", "regressions"]
    runs_shown = [line.split()[4] for line in out[2:-1]]
    assert runs_shown == ["m4", "m5", "n5", "n6", "manual"]  # the last 2 nights of each workload (k10, then k3) on cpu
    assert main(["history", "--history-dir", str(tmp_path / "history"), "--last", "0"]) == 2
    assert "last: 0 nights, fewer than 1; fix: pass a number of nights, at least 1" in capsys.readouterr().err
    # a target that does not exist is bad input, not an empty table ("no runs", exit 0)
    assert main(["history", "--history-dir", str(tmp_path / "history"), "--last", "5", "--target", "bogus"]) == 2
    assert "target: unknown 'bogus'; fix: pass one of cpu, " in capsys.readouterr().err


def test_the_marks_count_the_runs_in_a_row_the_rules_ask_for(runs):
    """With ``performance.consecutive = 1`` the slow night failed the run at once: its mark says "1 of 1"."""
    from titanflow.judge.regression import Performance, load_rules

    rules = load_rules().model_copy(update={"performance": Performance(consecutive=1)})
    table = trend_table(runs, target="cpu", workloads=["k10"], rules=rules)
    assert _night(table, "native", 5).regressions == "tokens_per_s -50% (1 of 1)"
