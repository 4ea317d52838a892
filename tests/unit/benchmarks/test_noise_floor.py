"""benchmarks/noise_floor.py: the largest move of each performance metric in its worse direction among the passing
runs of one unchanged workload, from history rows built by hand (tests/helpers/history_rows.py)."""

import importlib.util
import sys

import pandas as pd
import pytest
from helpers.history_rows import history_row

from titanflow.paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location("noise_floor_benchmark", REPO_ROOT / "benchmarks" / "noise_floor.py")
noise_floor = sys.modules["noise_floor_benchmark"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noise_floor)


def test_the_largest_move_in_the_worse_direction_per_metric_among_passing_runs():
    # tokens/s 600, 610, 590, 400 (median 595: 195 lower at worst); total time 60, 60, 60, 90 (median 60: 30 higher);
    # a failed run at 10 tokens/s and the same run kept twice are not counted
    rows = [history_row("a", 1), history_row("b", 2, tokens_per_s=610.0), history_row("c", 3, tokens_per_s=590.0),
            history_row("d", 4, tokens_per_s=400.0, total_s=90.0),
            history_row("d", 4, tokens_per_s=400.0, total_s=90.0),
            history_row("e", 5, tokens_per_s=10.0, verdict="fail", failure_class="infrastructure")]
    table = noise_floor.moves(pd.DataFrame(rows), min_runs=4).set_index("metric")
    assert table.loc["tokens_per_s", "runs"] == 4 and table.loc["tokens_per_s", "median"] == 595.0
    assert table.loc["tokens_per_s", "worse_by"] == 195.0
    assert table.loc["total_s", "worse_by"] == 30.0 and table.loc["total_s", "relative"] == pytest.approx(0.5)
    assert table.loc["seconds_train", "worse_by"] == 0.0  # task_seconds: every seconds_<task> column
    assert noise_floor.moves(pd.DataFrame(rows), min_runs=5).empty  # too few passing runs to measure
