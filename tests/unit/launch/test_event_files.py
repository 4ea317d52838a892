"""The run's metrics from torchtitan's TensorBoard event files (titanflow.launch.event_files), and the console line
as the fallback the record names.

Event files are written here by ``torch.utils.tensorboard.SummaryWriter``, the writer torchtitan 0.3.0's
TensorBoardLogger uses, with the tags its MetricsProcessor.log writes; the console lines are those of a real run
(tests/fixtures/train-native-cpu-3steps.log: 3 steps, losses 11.94006, 11.93394, 11.89889).
"""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from titanflow.launch.event_files import TAGS, TENSORBOARD, events_table, run_metrics, tb_dir
from titanflow.launch.metrics import COLUMNS
from titanflow.launch.render import RenderedJob, make_job
from titanflow.launch.torchrun import run_training
from titanflow.params import ScenarioRun

FIXTURE_LOG = Path(__file__).parents[2] / "fixtures" / "train-native-cpu-3steps.log"
#: The fixture's step lines' losses, as printed (5 decimals).
CONSOLE_LOSSES = [11.94006, 11.93394, 11.89889]
#: Losses at more than float32's 7 significant digits: the event file keeps each one's float32.
FULL_LOSSES = {1: 11.940061234, 2: 11.933937777, 3: 11.898891111, 4: 11.852790001, 5: 11.806100002}


def write_launch(folder: Path, steps: list[int], losses: dict[int, float], mfu: bool = True) -> Path:
    """One launch's event file under ``folder`` (a date-time folder, as torchtitan names it) with every tag of
    :data:`TAGS` at ``steps`` (``mfu``: False leaves out mfu(%), as torchtitan does under quantization)."""
    writer = SummaryWriter(str(folder), max_queue=1000)  # torchtitan's TensorBoardLogger's writer and queue
    for step in steps:
        for column, tag in TAGS.items():
            if column == "mfu_pct" and not mfu:
                continue
            writer.add_scalar(tag, losses[step] if column == "loss" else 1000 * step + len(column) / 7, step)
    writer.close()
    return folder


def test_the_reader_keeps_every_scalar_at_the_float32_the_event_file_holds(tmp_path):
    write_launch(tmp_path / "tb" / "20261205-0900", [1, 2, 3], FULL_LOSSES, mfu=False)
    table = events_table(tmp_path / "tb")
    assert list(table.columns) == COLUMNS and list(table.step) == [1, 2, 3]
    # SummaryWriter stores a scalar as a float32 simple_value: the table holds that value exactly
    assert list(table.loss) == [float(np.float32(FULL_LOSSES[s])) for s in (1, 2, 3)]
    assert all(round(x, 5) != x for x in table.loss)  # more than the console's 5 decimals
    assert list(table.step_time_s) == [float(np.float32(1000 * s + len("step_time_s") / 7)) for s in (1, 2, 3)]
    assert table.mfu_pct.isna().all()  # no mfu(%) tag: NaN, not 0


def test_two_launches_fold_so_the_later_one_replaces_the_steps_it_trained_again(tmp_path):
    """Launch 1 logged steps 1-4 and died; launch 2 resumed from the step-2 checkpoint and logged 3-5: the curve is
    launch 1's steps 1-2 and launch 2's 3-5 (titanflow.launch.metrics.metrics_table folds train.log the same way)."""
    write_launch(tmp_path / "tb" / "20261205-0900", [1, 2, 3, 4], FULL_LOSSES)
    time.sleep(0.01)  # the launches are told apart by their first event's time
    second = {s: x + 1 for s, x in FULL_LOSSES.items()}
    write_launch(tmp_path / "tb" / "20261205-0900", [3, 4, 5], second)  # the same minute: the same folder
    table = events_table(tmp_path / "tb")
    assert list(table.step) == [1, 2, 3, 4, 5]
    assert list(table.loss) == [float(np.float32(x)) for x in
                                (FULL_LOSSES[1], FULL_LOSSES[2], second[3], second[4], second[5])]


@pytest.mark.fault
def test_event_files_that_lack_a_step_the_console_logged_leave_the_console_line_and_say_which(tmp_path):
    """A launch killed before its writer flushed: the event files have steps 1-2, train.log's console lines 1-3."""
    write_launch(tmp_path / "train" / "tb" / "20261205-0900", [1, 2], FULL_LOSSES)
    table, source = run_metrics(FIXTURE_LOG, tmp_path / "train" / "tb")
    assert source == ("console line: the event files under train/tb lack steps 3 that train.log has (a launch ended "
                      "before its writer flushed them)")
    assert list(table.loss) == CONSOLE_LOSSES


@pytest.fixture()
def job(tmp_path, tiny_assets):
    """The native cpu job at 3 steps (the fixture log's), written to ``run/job/job.json``."""
    job = make_job(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    (tmp_path / "run" / "job").mkdir(parents=True)
    job.write(tmp_path / "run" / "job" / "job.json")
    return job


def stand_in(tmp_path: Path, run_dir: Path, events_under: Path | None) -> RenderedJob:
    """A stand-in for torchrun that prints the fixture's real rank-0 lines and, with ``events_under``, writes the
    event file torchtitan's logger would (full-precision losses :data:`FULL_LOSSES`), then exits 0."""
    script = tmp_path / "stand_in_torchrun.py"
    write = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
             f"from test_event_files import FULL_LOSSES, write_launch\n"
             f"from pathlib import Path\nwrite_launch(Path({str(events_under)!r}), [1, 2, 3], FULL_LOSSES)\n"
             if events_under else "")
    script.write_text(f"{write}print(open({str(FIXTURE_LOG)!r}).read(), end='', flush=True)\n")
    return RenderedJob(run_dir=str(run_dir), job_path=str(run_dir / "job" / "job.json"), env={},
                       argv=[sys.executable, str(script), "--log-dir", str(tmp_path / "ranks")],
                       trainer_config_path=str(run_dir / "job" / "trainer_config.json"))


@pytest.mark.fault
def test_a_launch_without_event_files_is_measured_from_its_console_line_and_the_record_says_why(job, tmp_path):
    """torchtitan's logger off (a fork that does not take the field, say): the step lines are the source."""
    result = run_training(stand_in(tmp_path, tmp_path / "run", None), timeout_s=60)
    assert result.metrics_source == ("console line: no TensorBoard event files under train/tb (torchtitan's logger "
                                     "was off)")
    assert result.losses == CONSOLE_LOSSES
    assert result.step_time_s is None  # the console line prints no step time
    assert result.mfu_pct == 0.0  # "mfu: 0.00%" as printed
    assert (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0] == ",".join(COLUMNS)


def test_a_launch_with_event_files_is_measured_from_them(job, tmp_path):
    result = run_training(stand_in(tmp_path, tmp_path / "run", tb_dir(Path(job.dump_folder)) / "20261205-0900"),
                          timeout_s=60)
    assert result.metrics_source == TENSORBOARD
    assert result.losses == [float(np.float32(FULL_LOSSES[s])) for s in (1, 2, 3)]
    # the median over steps >= 2 of what the file holds at steps 2 and 3 (write_launch's values)
    assert result.step_time_s == pytest.approx(float(np.median([np.float32(2000 + 11 / 7), np.float32(3000 + 11 / 7)])))
    assert result.mfu_pct == float(np.median([np.float32(2000 + 7 / 7), np.float32(3000 + 7 / 7)]))

