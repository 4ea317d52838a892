"""The nightly's reports after its runs: each failed run compared with the last passing run of its workload
(tasks/compare.py) and the trends of the target (tasks/trends.py), published to a real Prefect server
(``prefect_test_harness``) from a history built by hand (tests/helpers/history_rows.py) and read back."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.history_rows import NATIVE_CPU_RANDOM_LOSSES, history_row
from helpers.prefect_harness import artifacts_of

from titanflow.record.history import append_rows

#: The failed run: lr 3e-3 instead of 8e-4 from step 4 on (step 1-3 as the passing runs'), 0.05 nats higher.
FAILED_LOSSES = NATIVE_CPU_RANDOM_LOSSES[:3] + [x + 0.05 for x in NATIVE_CPU_RANDOM_LOSSES[3:]]




def test_failed_run_compared_and_trends_published(prefect_server, tmp_path, monkeypatch):
    from prefect import flow

    from titanflow.flows.nightly import _report_task
    from titanflow.report.nightly import SuiteRow, suite_markdown
    from titanflow.tasks.compare import compare_last_pass
    from titanflow.tasks.trends import trends

    monkeypatch.setenv("TITANFLOW_HISTORY", str(tmp_path / "history"))
    (tmp_path / "n4").mkdir()
    append_rows([history_row(f"n{d}", d, run_dir=str(tmp_path / f"n{d}")) for d in (1, 2, 3)]
                + [history_row("n4", 4, verdict="fail", failure_class="numerics", losses=FAILED_LOSSES, lr=3e-3,
                               run_dir=str(tmp_path / "n4"))], tmp_path / "history")

    @flow
    def reports():
        compared = _report_task(compare_last_pass, "n4")
        missing = _report_task(compare_last_pass, "not-a-run")  # fails inside: logged, None
        png = _report_task(trends, "cpu", ["n4"])
        return compared, missing, png

    state = reports(return_state=True)
    assert state.is_completed()
    compared, missing, png = state.result()
    assert compared.startswith("n4 (fail) vs n3 (pass): curves part at step 4 ")  # 0.05 > 0.02 from step 4
    assert missing is None
    assert png == str(tmp_path / "history" / "_trends-cpu.png")
    assert len(pd.read_parquet(tmp_path / "history")) == 4  # the folder still reads as the history table alone
    artifacts = artifacts_of(state.state_details.flow_run_id)
    assert set(artifacts) == {"native-cpu-random-compare", "native-cpu-random-compare-steps", "trends-cpu"}
    steps = json.loads(artifacts["native-cpu-random-compare-steps"].data)
    assert [r["parted"] for r in steps] == [False] * 3 + [True] * 7
    assert steps[3]["difference"] == pytest.approx(0.05)
    markdown = artifacts["native-cpu-random-compare"].data
    assert "data:image/png;base64," in markdown and "| parameter | lr | 0.0008 | 0.003 |" in markdown
    assert (tmp_path / "n4" / "compare-n3.png").is_file()  # in the failed run's folder
    trend = artifacts["trends-cpu"].data
    assert trend.startswith("# trends on cpu: the last 14 nights\n")
    assert "| native | random | k10 | 2026-12-04 | n4 | fail |" in trend and "fail: numerics" in trend
    report = suite_markdown("cpu", [SuiteRow(scenario="native", init="random", run_id="n4", verdict="fail",
                                             failure_class="numerics", reason="loss curve regression", flagged=0,
                                             compared=compared)])
    assert f"- **native / random** (numerics): loss curve regression\n  - against the last passing run: {compared}" \
        in report
