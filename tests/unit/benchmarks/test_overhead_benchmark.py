"""benchmarks/overhead.py's pure parts: the least-squares fit, tokens/s of a curve, the phases of a flow command."""

import datetime
import importlib.util
import sys

import pytest

from titanflow.launch.metrics import metrics_table
from titanflow.paths import REPO_ROOT
from titanflow.record.summary import RunSummary, read_summary

_spec = importlib.util.spec_from_file_location("overhead_benchmark", REPO_ROOT / "benchmarks" / "overhead.py")
overhead = sys.modules["overhead_benchmark"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(overhead)

T0 = datetime.datetime(2026, 12, 1, 14, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_fit_recovers_an_exact_line():
    # walls made from fixed 20 s + 1.5 s/step: the fit gives them back
    fixed, per_step = overhead.fit_fixed_per_step([5, 10, 20], [20 + 1.5 * 5, 20 + 1.5 * 10, 20 + 1.5 * 20])
    assert fixed == pytest.approx(20.0) and per_step == pytest.approx(1.5)


def test_fit_is_least_squares_off_the_line():
    # steps 1, 2, 3 and walls 1, 3, 2: means 2 and 2, Sxx = 2, Sxy = (-1)(-1) + 0 + (1)(0) = 1 (normal equations),
    # so per_step = Sxy / Sxx = 0.5 and fixed = 2 - 0.5 x 2 = 1.0
    assert overhead.fit_fixed_per_step([1, 2, 3], [1.0, 3.0, 2.0]) == pytest.approx((1.0, 0.5))


def test_fit_refuses_one_step_count_naming_the_option():
    with pytest.raises(ValueError, match="--steps"):
        overhead.fit_fixed_per_step([5, 5], [30.0, 31.0])


def test_median_tps_from_step_3_of_a_torchrun_console():
    # torchrun's console line (rank prefix, colours) as titanflow.launch.metrics parses it; tps 10, 20, 30, 50, 40:
    # steps 3-5 hold 30, 50, 40, whose median is 40
    lines = [f"[default0]:\x1b[31mstep: {s}  loss: 11.9  grad_norm: 1.0  memory:  0.98GiB(4.14%)  tps: {t}"
             for s, t in zip(range(1, 6), (10, 20, 30, 50, 40))]
    assert overhead.median_tps(metrics_table(lines)) == 40.0


def test_median_tps_refuses_a_run_shorter_than_step_3():
    lines = ["step: 1  loss: 11.9  memory:  0.98GiB(4.14%)  tps: 10", "step: 2  loss: 11.8  memory:  1GiB  tps: 12"]
    with pytest.raises(ValueError, match="steps: no step >= 3"):
        overhead.median_tps(metrics_table(lines))


@pytest.fixture
def summary(tmp_path) -> RunSummary:
    """A finished run's summary.json, read back as every reader reads it: started 2.5 s after the command, tasks
    1 + 4 + 0 + 10 + 2 + 3 + 0.5 = 20.5 s, a 1.5 s slot wait, last written 30 s after the command."""
    written = RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=5, started_at=at(2.5),
                         finished_at=at(30.0), slot_wait_s=1.5,
                         timings_s={"pull_weights": 1.0, "render_config": 4.0, "compile_warmup": 0.0, "train": 10.0,
                                    "export": 2.0, "validate": 3.0, "compare_loss": 0.5})
    path = tmp_path / "summary.json"
    path.write_text(written.model_dump_json(indent=2))
    return read_summary(path)


def test_phases_sum_to_the_wall_with_untimed_tasks_from_prefect(summary):
    command = overhead.Timed(started=T0, wall_s=40.0)
    # given out of order, as Prefect's API lists task runs (newest first): the rows follow their starts
    untimed = {"report": (at(30.2), at(33.0)), "append_history": (at(28.0), at(29.5)),
               "compare_history": (at(27.0), at(28.0))}
    rows = overhead.phase_rows(summary, command, untimed)
    # before: 2.5 s; after: 40 - 33 (report's end, later than the last write at 30) = 7 s; tasks 20.5 + slot 1.5 +
    # untimed 1 + 1.5 + 2.8 = 27.3 s; unaccounted = 40 - 2.5 - 7 - 27.3 = 3.2 s
    assert [name for name, _ in rows] == ["before the flow", "pull_weights", "render_config", "compile_warmup", "train",
                                          "export", "validate", "compare_loss", "slot wait", "compare_history",
                                          "append_history", "report", "unaccounted", "after the flow"]
    seconds = dict(rows)
    assert seconds["before the flow"] == pytest.approx(2.5)
    assert seconds["report"] == pytest.approx(2.8)
    assert seconds["after the flow"] == pytest.approx(7.0)
    assert seconds["unaccounted"] == pytest.approx(3.2)
    assert sum(seconds.values()) == pytest.approx(command.wall_s)


def test_phases_without_prefect_end_at_the_summary_last_write(summary):
    # temporary server: no task runs to read; after = 40 - 30 = 10 s, unaccounted = 40 - 2.5 - 10 - 22 = 5.5 s
    rows = dict(overhead.phase_rows(summary, overhead.Timed(started=T0, wall_s=40.0), {}))
    assert "report" not in rows
    assert rows["after the flow"] == pytest.approx(10.0) and rows["unaccounted"] == pytest.approx(5.5)
    assert sum(rows.values()) == pytest.approx(40.0)


def test_phases_refuse_a_summary_that_never_finished(summary):
    with pytest.raises(ValueError, match="started_at/finished_at missing"):
        overhead.phase_rows(summary.model_copy(update={"finished_at": None}), overhead.Timed(T0, 40.0), {})


def test_steps_option_names_itself_on_bad_input():
    assert overhead.parse_steps("5,10,20") == [5, 10, 20]
    for bad in ("5,x", "2,10"):
        with pytest.raises(Exception, match="--steps"):
            overhead.parse_steps(bad)
