"""The terminal view of ``titanflow run`` (titanflow.run.console).

The training log replayed is a real rank-0 ``train.log`` of ``titanflow run native --target cpu --steps 3``
on 2 ranks (tests/fixtures/README.md); what the view shows is read from its rendering, as a terminal gets it.
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import re
import types

import pytest
from helpers import FIXTURES
from rich.console import Console

from titanflow.record.summary import RunSummary
from titanflow.run.console import RunView, wants_view
from titanflow.run.recorder import RunRecorder
from titanflow.task_names import PHASE_LOGGER

LOG_LINES = (FIXTURES / "train-native-cpu-3steps.log").read_text().splitlines()
STEPS, WORLD_SIZE = 3, 2  # the fixture's run: --steps 3, 2 ranks
#: torchtitan's own stamp on each line, "[titan] 2026-11-30 00:15:27,376": the clock the replay runs on
STAMP = re.compile(r"\[titan\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def _stamp_s(line: str) -> float | None:
    found = STAMP.search(line)
    return datetime.datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() if found else None


def _record(message: str, task: str | None, level: int = logging.INFO, name: str = "prefect.task_runs"):
    """A record as a Prefect run logger makes it: the task's name in ``task_name`` (PrefectLogAdapter's extra)."""
    fields = {"name": name, "msg": message, "levelno": level, "levelname": logging.getLevelName(level)}
    return logging.makeLogRecord(fields | ({"task_name": task} if task else {}))


def _view(clock: list[float] | None = None) -> tuple[RunView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=150, color_system=None, force_terminal=True)
    return RunView(STEPS, WORLD_SIZE, console=console, get_time=(lambda: clock[0]) if clock else None), out


def _shown(view: RunView) -> str:
    """The live row as the terminal shows it (one line of text)."""
    console = Console(file=io.StringIO(), width=150, color_system=None)
    with console.capture() as captured:
        console.print(view.progress.make_tasks_table(view.progress.tasks))
    return captured.get().strip()


def test_the_bar_follows_a_real_training_log_step_by_step():
    """Each step line sets the bar: step of 3, its loss, tokens/s of both ranks (the line's per-rank ``tps`` x 2, as
    the summary's tokens/s) and the time left from the pace of the steps so far, all read off the log itself."""
    clock = [0.0]
    view, _ = _view(clock)
    view.handle(_phase("train", "started"))
    step_lines = [line for line in LOG_LINES if "loss:" in line]
    losses = [float(re.search(r"loss: ([0-9.]+)", line)[1]) for line in step_lines]
    tps = [int(re.search(r"tps: (\d+)", line)[1]) for line in step_lines]
    stamps = [_stamp_s(line) for line in step_lines]
    assert losses == [11.94006, 11.93394, 11.89889] and tps == [93, 179, 180]  # the fixture README's figures
    seen = []
    for line in LOG_LINES:
        clock[0] = _stamp_s(line) or clock[0]
        view.handle(_record(line, "train"))
        if line in step_lines:
            seen.append(_shown(view))
        elif "Training starts at step 1" in line:  # before the first step: the latest line of the launch
            assert "Training starts at step 1" in _shown(view) and "0/3" not in _shown(view)
    assert [f"{n}/3 steps · loss {loss:.4f} · {t * WORLD_SIZE} tokens/s" in shown
            for n, (loss, t, shown) in enumerate(zip(losses, tps, seen), 1)] == [True] * 3
    # after step 1 there is no pace yet; after step 2, one step of (t2 - t1) = 2.864 s is left, shown in whole
    # seconds rounded up (rich's TimeRemainingColumn); after step 3 none
    assert "-:--:-- left" in seen[0]
    left_s = int(-(-(stamps[1] - stamps[0]) // 1))
    assert left_s == 3 and f"0:00:0{left_s} left" in seen[1]
    assert "0:00:00 left" in seen[2]
    task = view.progress.tasks[0]
    assert (task.completed, task.total, task.description) == (3, 3, "train")


def _phase(task: str, state: str, seconds: float | None = None) -> logging.LogRecord:
    fields = {"phase": task, "phase_state": state} | ({"phase_s": seconds} if seconds is not None else {})
    return logging.makeLogRecord({"name": PHASE_LOGGER.name, "msg": f"{task} {state}", "levelno": logging.INFO,
                                  "levelname": "INFO", **fields})


def test_a_batch_of_lines_in_one_record_sets_the_bar_to_its_last_step():
    """tasks/train.py logs the lines waiting as one record, joined by newlines: every step line of it counts."""
    view, _ = _view()
    view.handle(_phase("train", "started"))
    view.handle(_record("\n".join(LOG_LINES[:41]), "train"))  # up to "Training starts at step 1"
    assert view.progress.tasks[0].completed == 0 and "Training starts at step 1" in _shown(view)
    view.handle(_record("\n".join(LOG_LINES[41:]), "train"))  # steps 1 to 3 in one batch
    assert "3/3 steps · loss 11.8989 · 360 tokens/s" in _shown(view)


def test_a_retry_restarts_the_count_at_the_step_it_resumes_from():
    """A launch line resuming from step 2's checkpoint sets the bar back to 2 of 3; the next step line shown is
    step 3 of the new launch, even though the first launch had shown it already."""
    view, _ = _view()
    view.handle(_phase("train", "started"))
    step_lines = [line for line in LOG_LINES if "loss:" in line]
    for line in step_lines:
        view.handle(_record(line, "train"))
    view.handle(_record("titanflow: launch 2 resumes from step 2: a retry", "train"))
    assert view.progress.tasks[0].completed == 2 and "launch 2 resumes from step 2" in _shown(view)
    view.handle(_record(step_lines[2].replace("loss: 11.89889", "loss: 11.70000"), "train"))
    assert "3/3 steps · loss 11.7000" in _shown(view)


def test_tasks_show_as_status_lines_from_the_flows_recorder(tmp_path):
    """RunRecorder.task tells each task's start and end on PHASE_LOGGER: a finished task prints its line (mark,
    name, seconds, cached or failed), training's with its last step; the running task is the live row."""
    view, out = _view()
    record = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3))
    level = PHASE_LOGGER.level
    PHASE_LOGGER.addHandler(view)
    PHASE_LOGGER.setLevel(logging.INFO)
    try:
        with record.task(types.SimpleNamespace(name="pull_weights")):
            view.handle(_record("weights folder: /w", "pull_weights"))
            shown = _shown(view)
            assert shown.split()[1] == "pull_weights" and re.search(r"weights folder: /w +0:00:00$", shown)
        with record.task(types.SimpleNamespace(name="render_config")):
            record.summary.cached_tasks.append("render_config")
        with pytest.raises(RuntimeError), record.task(types.SimpleNamespace(name="train")):
            view.handle(_record(next(line for line in LOG_LINES if "step:  1" in line), "train"))
            raise RuntimeError("rank 1 exited")
    finally:
        PHASE_LOGGER.removeHandler(view)
        PHASE_LOGGER.setLevel(level)
    lines = out.getvalue().splitlines()
    seconds = record.summary.timings_s
    assert lines == [f"✓ pull_weights     {seconds['pull_weights']:6.1f} s",
                     f"✓ render_config    {seconds['render_config']:6.1f} s  cached",
                     f"✗ train            {seconds['train']:6.1f} s  failed  1/3 steps · loss 11.9401 · 186 tokens/s"]


def test_warnings_print_above_the_row_and_debug_is_dropped():
    view, out = _view()
    view.handle(_record("training untied lm_head\nsecond line", "export", logging.WARNING))
    view.handle(_record("a library's warning", None, logging.WARNING, name="transformers.modeling_utils"))
    view.handle(_record("not shown", "export", logging.DEBUG))
    assert out.getvalue().splitlines() == ["WARNING export: training untied lm_head",
                                           "WARNING transformers.modeling_utils: a library's warning"]


def test_attached_silences_prefects_console_only_while_it_lasts():
    """Inside ``attached``: Prefect's console handler drops every record, the view gets them from the root logger
    and the phase logger makes INFO records; Prefect's API handler is untouched; afterwards all is as before."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

    ensure_logging_setup()  # as importing the flow does (prefect.main)

    root = logging.getLogger()
    (console,) = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    api = [h for h in logging.getLogger("prefect.task_runs").handlers if isinstance(h, APILogHandler)]
    record = _record("hello", "export")
    view, _ = _view()
    assert console.filter(record) and not PHASE_LOGGER.isEnabledFor(logging.INFO)
    with view.attached():
        assert not console.filter(record) and view in root.handlers and PHASE_LOGGER.isEnabledFor(logging.INFO)
        assert api and all(h.filter(record) for h in api)
    assert console.filter(record) and view not in root.handlers and not PHASE_LOGGER.isEnabledFor(logging.INFO)


def test_the_view_shows_only_on_a_terminal_and_without_log(monkeypatch):
    master, replica = os.openpty()
    with open(replica, "w") as tty, open(master, "rb"):
        monkeypatch.setenv("TERM", "xterm-256color")
        assert wants_view(False, tty, tty)
        assert not wants_view(True, tty, tty)  # --log
        assert not wants_view(False, io.StringIO(), tty)  # stdout to a pipe or file
        assert not wants_view(False, tty, io.StringIO())  # stderr to a pipe or file
        monkeypatch.setenv("TERM", "dumb")
        assert not wants_view(False, tty, tty)


def test_a_prefect_flow_drives_the_view_and_its_api_log_keeps_every_line(prefect_server, tmp_path, capfd):
    """A flow as qwen3-scenario is built (RunRecorder around tasks named as its tasks, the train task logging the
    launch's lines in batches with its run logger), run with the view attached: the terminal gets the status lines and the
    bar, Prefect's console handler prints nothing, and the Prefect API's log holds every line the tasks logged."""
    from prefect import flow, get_client, task
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging import get_run_logger
    from prefect.logging.handlers import APILogWorker

    @task(name="pull_weights")
    def pull_weights():
        get_run_logger().info("weights folder: /w")

    batches = ["\n".join(LOG_LINES[:43]), "\n".join(LOG_LINES[43:])]  # steps 1-2, then step 3 and the rest

    @task(name="train")
    def train():
        logger = get_run_logger()
        for batch in batches:  # as tasks/train.py logs them: one record per batch of lines
            logger.info(batch)

    @flow
    def scenario_like():
        record = RunRecorder(tmp_path, RunSummary(run_id="r", scenario="native", target="cpu", init="random", steps=3))
        for called in (pull_weights, train):
            with record.task(called):
                called()
        return record.summary.timings_s

    view, out = _view()
    capfd.readouterr()
    with view.attached():
        state = scenario_like(return_state=True)
    seconds = state.result()
    assert "weights folder" not in capfd.readouterr().err  # Prefect's console handler printed none of it
    assert out.getvalue().splitlines() == [f"✓ pull_weights     {seconds['pull_weights']:6.1f} s",
                                           f"✓ train            {seconds['train']:6.1f} s  3/3 steps · loss 11.8989 · "
                                           "360 tokens/s"]
    APILogWorker.drain_all(timeout=10)  # as titanflow run does before its server stops
    with get_client(sync_client=True) as client:
        logged = [log.message for log in client.read_logs(LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))]
    assert "weights folder: /w" in logged and all(batch in logged for batch in batches)
