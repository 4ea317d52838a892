"""Monitoring artifacts: loss-curve plot, markdown report, findings table and training progress.

The log is a real rank-0 ``train.log`` of ``titanflow run native --target cpu --steps 3``
(tests/fixtures/README.md). Artifacts are published to a real Prefect server
(``prefect_test_harness``) and read back with the Prefect client.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from pathlib import Path

import pytest
from helpers import FIXTURES
from helpers.prefect_harness import artifacts_of
from matplotlib.image import imread

from titanflow.launch.metrics import log_tail, metrics_table
from titanflow.record.summary import RunSummary, read_summary
from titanflow.report.artifacts import TrainingProgress, artifact_key, findings_rows
from titanflow.report.markdown import LOG_TAIL_LINES, fenced, summary_markdown
from titanflow.report.plots import DPI, FIGSIZE_IN, curve_points, loss_curve_figure, write_loss_curve
from titanflow.results import Finding, LossVerdict
from titanflow.run.recorder import RunRecorder
from titanflow.tasks.report import report
from titanflow.tasks.train import train

LOG = FIXTURES / "train-native-cpu-3steps.log"
LOG_LINES = LOG.read_text().splitlines()
#: The three losses of that log, as its step lines print them.
LOSSES = [11.94006, 11.93394, 11.89889]
#: 6.4 x 3.6 in at 100 dpi (titanflow.report.plots).
PNG_SIZE = (round(FIGSIZE_IN[0] * DPI), round(FIGSIZE_IN[1] * DPI))
FIELDS = {"run_id": "native-cpu-random-test", "scenario": "native", "target": "cpu", "init": "random", "steps": 3}
FINDINGS = [
    Finding(metric="losses", value=11.93394, baseline=11.93389, margin=0.02, passed=True, status="pass",
            finding_class="numerics", detail="step 2"),
    Finding(metric="tokens_per_s", value=450.0, baseline=600.0, margin=0.05, passed=False, status="fail",
            finding_class="performance", detail="450 vs median 600"),
    Finding(metric="peak_memory_gib", value=1.09, baseline=None, margin=0.1, passed=None, status="no baseline",
            finding_class="performance", detail="0 comparable passing run(s), need 3"),
]


def _data_uri_png(markdown: str) -> bytes:
    (encoded,) = re.findall(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown)
    return base64.b64decode(encoded)


def _failed_run(run_dir: Path) -> Path:
    """A run whose train task failed, recorded the way the flow records it (RunRecorder), with the real log."""
    run_dir.mkdir()
    (run_dir / "train.log").write_text(LOG.read_text() + "titanflow: killed after the 8 s timeout\n")
    metrics_table(LOG_LINES).to_csv(run_dir / "metrics.csv", index=False)
    record = RunRecorder(run_dir, RunSummary(**FIELDS))
    with pytest.raises(RuntimeError), record.task(train):
        raise RuntimeError("train: timed out after 8 s; full log train.log")
    return record.write()


# --- plot --------------------------------------------------------------------------------------

def test_curve_points_accept_losses_from_step_one_or_a_step_mapping():
    assert curve_points([11.9, 11.8]) == ([1, 2], [11.9, 11.8])
    assert curve_points({3: 6.68, 1: 6.41}) == ([1, 3], [6.41, 6.68])
    with pytest.raises(ValueError, match="1-based"):
        curve_points({0: 1.0})


def test_plot_draws_this_run_golden_and_each_past_run():
    history = {"run-a": [11.95, 11.93, 11.90], "run-b": {1: 11.94, 2: 11.92, 3: 11.91}}
    fig = loss_curve_figure(LOSSES, golden={1: 11.944, 2: 11.93, 3: 11.9}, history=history)
    (ax,) = fig.axes
    # 2 past runs + golden + this run, this run drawn last (on top)
    assert len(ax.get_lines()) == 4
    assert list(ax.get_lines()[-1].get_ydata()) == LOSSES
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["last 2 passing runs", "golden", "this run"]
    assert len(loss_curve_figure(LOSSES).axes[0].get_lines()) == 1


def test_plot_refuses_a_run_without_steps():
    with pytest.raises(ValueError, match="no training step"):
        loss_curve_figure([])


def test_plot_file_is_a_small_png_of_the_stated_size(tmp_path):
    path = write_loss_curve(tmp_path / "loss_curve.png", LOSSES, golden=LOSSES, history={"a": LOSSES})
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    height, width, channels = imread(path).shape
    assert (width, height) == PNG_SIZE and channels == 4  # RGBA, as Agg writes it
    assert path.stat().st_size < 100_000  # small enough to inline in a markdown artifact


# --- markdown ----------------------------------------------------------------------------------

def test_fence_outlasts_backticks_in_the_log():
    block = fenced("a ```` b")
    assert block.startswith("`````text\n") and block.endswith("\n`````")
    assert fenced("plain").startswith("```text\n")


def test_log_tail_is_the_last_lines_without_colour_codes(tmp_path):
    tail = log_tail(LOG, LOG_TAIL_LINES).splitlines()
    assert len(tail) == LOG_TAIL_LINES == 40
    assert tail[-1] == LOG_LINES[-1]
    assert not any("\x1b[" in line for line in tail)
    assert log_tail(tmp_path / "absent.log", LOG_TAIL_LINES) is None


def test_failed_run_report_has_verdict_reason_log_tail_and_plot(tmp_path):
    summary_path = _failed_run(tmp_path / "run")
    summary = read_summary(summary_path)
    png = write_loss_curve(tmp_path / "run" / "loss_curve.png", LOSSES)
    markdown = summary_markdown(summary, loss_curve=png, log=log_tail(tmp_path / "run" / "train.log", LOG_TAIL_LINES),
                                findings=FINDINGS)
    assert markdown.startswith("# native on cpu (random init): FAIL\n")
    assert "- failed task: `train`: RuntimeError: train: timed out after 8 s" in markdown
    assert "Last 40 lines of train.log" in markdown
    block = markdown.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert block.splitlines()[-1] == "titanflow: killed after the 8 s timeout"
    assert "step:  3  loss: 11.89889" in block
    # only the finding out of margin is listed, with its class
    assert "- out of margin (performance): tokens_per_s 450.0 against baseline 600.0 (margin 0.05)" in markdown
    assert "out of margin (numerics)" not in markdown and "peak_memory_gib" not in markdown
    assert _data_uri_png(markdown) == png.read_bytes()


def test_passing_run_report_has_no_log_tail(tmp_path):
    reason = "|11.9400 - 11.9440| = 0.0040 <= 0.15"
    loss = LossVerdict(first_step_loss=LOSSES[0], expected_first_step_loss=11.944, tolerance=0.15,
                       expectation_source="derived", verdict="pass", reason=reason)
    summary = RunSummary(**FIELDS, loss=loss, verdict="pass", reason=reason, timings_s={"train": 20.0})
    markdown = summary_markdown(summary, log="\n".join(LOG_LINES))
    assert markdown.startswith("# native on cpu (random init): PASS\n")
    assert "- loss check (pass): |11.9400 - 11.9440| = 0.0040 <= 0.15" in markdown
    assert "train.log" not in markdown and "data:image" not in markdown


# --- findings ----------------------------------------------------------------------------------

def test_findings_rows_are_one_table_row_per_finding_with_a_class_column():
    rows = findings_rows(FINDINGS)
    assert [(r["metric"], r["passed"], r["class"]) for r in rows] == [
        ("losses", True, "numerics"), ("tokens_per_s", False, "performance"), ("peak_memory_gib", None, "performance")]
    assert rows[2]["status"] == "no baseline" and rows[2]["detail"] == "0 comparable passing run(s), need 3"


# --- against a Prefect server ------------------------------------------------------------------



def test_report_task_publishes_keyed_artifacts(prefect_server, tmp_path):
    from prefect import flow

    summary_path = _failed_run(tmp_path / "run")

    @flow
    def publish():
        report(str(summary_path), None, golden=LOSSES, history={"run-a": LOSSES}, findings=FINDINGS)

    state = publish(return_state=True)
    assert state.is_completed()
    artifacts = artifacts_of(state.state_details.flow_run_id)
    key = artifact_key(FIELDS)
    assert key == "native-cpu-random"
    assert set(artifacts) == {f"{key}-metrics", f"{key}-summary", f"{key}-baselines"}
    metrics = json.loads(artifacts[f"{key}-metrics"].data)
    assert [row["loss"] for row in metrics] == LOSSES  # metrics.csv beside the summary, kept by the failed run
    markdown = artifacts[f"{key}-summary"].data
    assert "FAIL" in markdown and "Last 40 lines of train.log" in markdown
    png = tmp_path / "run" / "loss_curve.png"
    assert _data_uri_png(markdown) == png.read_bytes()
    assert len(artifacts[f"{key}-summary"].data) < 150_000
    table = json.loads(artifacts[f"{key}-baselines"].data)
    assert [(r["metric"], r["passed"], r["class"]) for r in table] == [
        ("losses", True, "numerics"), ("tokens_per_s", False, "performance"), ("peak_memory_gib", None, "performance")]
    assert artifacts[f"{key}-baselines"].description.endswith("3 metrics against their baselines, 1 out of margin")


@pytest.mark.fault
def test_progress_update_failure_is_counted_not_raised():
    progress = TrainingProgress("native-cpu-random", total_steps=3, run_id="r1")  # never opened: no client
    step_lines = [line for line in LOG_LINES if "loss:" in line]
    for line in step_lines:
        progress.on_line(line)  # must not raise: it runs in the launcher's pipe-reader thread
    assert (progress.updates, progress.failures, progress.last_step) == (0, 3, 3)
    with pytest.raises(ValueError, match="total_steps is 0"):
        TrainingProgress("native-cpu-random", total_steps=0, run_id="r1")


def test_a_batch_of_step_lines_advances_the_progress_once_to_its_newest_step():
    """The run log's forwarder hands the lines over in batches (titanflow.launch.forward): one artifact update per
    batch, to the newest step it holds; a batch of steps already seen updates nothing."""
    progress = TrainingProgress("native-cpu-random", total_steps=3, run_id="r1")  # never opened: updates fail
    progress.on_lines(LOG_LINES)
    assert (progress.failures, progress.last_step) == (1, 3)  # one attempted update, for step 3
    progress.on_lines([line for line in LOG_LINES if "loss:" in line])
    assert progress.failures == 1


def test_progress_artifact_advances_once_per_step_from_reader_threads(prefect_server):
    from prefect import flow, task

    @task
    def train_like():
        with TrainingProgress("native-cpu-random", total_steps=3, run_id="r1") as progress:
            # the launcher's two pipe readers: every line through both, so each step line arrives twice
            readers = [threading.Thread(target=lambda: [progress.on_line(line) for line in LOG_LINES])
                       for _ in range(2)]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
        return progress.updates, progress.failures, progress.last_step

    @flow
    def run():
        return train_like()

    state = run(return_state=True)
    assert state.result() == (3, 0, 3)  # updates, failed updates, last step
    (artifact,) = artifacts_of(state.state_details.flow_run_id).values()
    assert artifact.key == "native-cpu-random-progress" and artifact.type == "progress"
    assert artifact.data == 100.0  # 3 of 3 steps
    assert artifact.description == "run r1: step 3/3, loss 11.8989"


@pytest.mark.fault
def test_the_report_says_whether_the_curve_was_held_exactly_or_to_the_band():
    """A passing curve finding from another environment is shown with its detail (which names the band);
    the numerics environment and checkpoint are stated."""
    banded = Finding(metric="losses", value=6.5, baseline=6.4, margin=0.3, passed=True, status="pass",
                     finding_class="numerics", detail="step 3: |6.5 - 6.4| = 0.1 <= 0.3 (worst of 10 steps vs "
                     "x.curve.csv; other numerics than the golden's (Xeon, AVX512, torch 2.13.0+cpu): the band "
                     "measured across environments)")
    environment = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2", "isa_flags": [], "versions": {"torch": "2.13"}}
    summary = RunSummary(**FIELDS, verdict="pass", environment=environment, weights_digest="0123456789abcdef")
    markdown = summary_markdown(summary, findings=[banded])
    assert f"- loss curve vs golden (pass): {banded.detail}" in markdown
    assert "- numerics: AMD EPYC, AVX2, torch 2.13; checkpoint 0123456789abcdef" in markdown
