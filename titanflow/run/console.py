"""What ``titanflow run`` shows on a terminal: one status line per finished task, and a live row, drawn with
``rich.progress``, for the task running now; for training, a bar of steps with the loss, tokens/s and time left::

    ✓ pull_weights        0.1 s
    ✓ render_config      16.1 s
    ✓ compile_warmup      0.1 s
    ⠧ train ━╺━━━━━━━━━━━━━━━━━━━━━━ 2/40 steps · loss 11.9339 · 196 tokens/s          0:03:18 left 0:00:40

(a 40-step native run on cpu at step 2; docs/command-line.md, "What it prints", shows a whole run), and then, as in every mode, the run's
summary table (titanflow.cli.print_summary) on stdout.

What drives it, all in the ``titanflow run`` process, where the flow runs (titanflow.cli._run_flow):

- the tasks' starts and ends: the records of :data:`titanflow.task_names.PHASE_LOGGER`, which the flow's
  RunRecorder writes around each task;
- the bar: the train task's run-log records (tasks/train.py logs the launch's output lines in batches, one record
  per batch, a line each), whose torchtitan step lines (:func:`titanflow.launch.metrics.parse_step_line`) set the step, loss and tokens/s; a launch line
  (:func:`titanflow.launch.metrics.parse_launch_line`: a retry resuming from a checkpoint) restarts the estimate;
- the live row's text: the last line of the latest INFO message of the flow or of any other task;
- a WARNING or above from any logger: its first line, printed above the live row.

While the view shows, Prefect's console handlers on the root logger (``PrefectConsoleHandler``, Prefect's
logging.yml) drop every record, so the Prefect log does not scroll over it; Prefect's API handlers are untouched:
the API and the UI get every record, as before.

When it shows (:func:`wants_view`): only when stdout and stderr are both terminals (not ``TERM=dumb``) and
``titanflow run --log`` is not given. Otherwise (a pipe, a file, CI, the tests) the terminal gets exactly what it
got before: the Prefect log, line by line on stderr, then the summary on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column
from rich.text import Text

from titanflow.launch.metrics import parse_launch_line, parse_step_line
from titanflow.task_names import PHASE_LOGGER, TaskName

#: The Prefect loggers of flow runs and task runs (Prefect's logging.yml): what a run logger writes.
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
#: Mark of a finished task's status line, per ``phase_state`` (titanflow.task_names.PHASE_LOGGER).
MARKS = {"completed": "✓", "cached": "✓", "failed": "✗", "cancelled": "■"}
#: Seconds of steps over which rich estimates the time left: a step of a large model on trn2 takes tens of
#: seconds, and the window must hold two step lines for an estimate (rich's default window is 30 s).
SPEED_WINDOW_S = 300.0


def wants_view(log: bool, stdout: IO | None = None, stderr: IO | None = None) -> bool:
    """Whether ``titanflow run`` shows the progress view (:class:`RunView`) rather than the Prefect log: not with
    ``--log`` (``log``), and only when ``stdout`` and ``stderr`` (default: sys's) are both terminals that can draw
    it (rich's ``Console.is_dumb_terminal``: ``TERM`` is ``dumb`` or ``unknown``)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if log or not (_isatty(stdout) and _isatty(stderr)):
        return False
    return not Console(file=stderr).is_dumb_terminal


def _isatty(stream: IO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class _TimeLeft(TimeRemainingColumn):
    """rich's time remaining, followed by ``left``; nothing on a row without a total (a task other than training)."""

    def render(self, task) -> Text:
        text = super().render(task)
        return text.append(" left") if task.total is not None else text


class RunView(logging.Handler):
    """The terminal view of one scenario run (module docstring): a ``logging.Handler`` fed the records of the run.

    ``total_steps``: the run's training steps (the bar's total); ``world_size``: its ranks, since torchtitan's
    ``tps`` is per rank and the view shows all ranks' tokens/s (as the summary's ``tokens/s``: per-rank tps x
    world size). ``console``: where it draws (default: stderr); ``get_time``: rich's clock (seconds; default
    monotonic time), given by tests to replay a log's timestamps.

    Use as a context manager around the run to draw the live row (cleared at the end; the status lines stay),
    and :meth:`attached` around the flow call, once Prefect is imported, to receive the records.

    Raises:
        ValueError: ``total_steps`` or ``world_size`` below 1.
    """

    def __init__(self, total_steps: int, world_size: int, console: Console | None = None,
                 get_time: Callable[[], float] | None = None):
        super().__init__(level=logging.INFO)
        if total_steps < 1 or world_size < 1:
            raise ValueError(f"total_steps {total_steps}, world_size {world_size}: both must be >= 1 (the run's "
                             "steps and ranks)")
        self.total_steps, self.world_size = total_steps, world_size
        # one line whatever the width: the detail (ratio 1) takes what the other columns leave, cut with an ellipsis
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=24), TextColumn("{task.fields[detail]}", markup=False,
                                                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
            _TimeLeft(table_column=Column(no_wrap=True)), TimeElapsedColumn(table_column=Column(no_wrap=True)),
            console=console or Console(stderr=True), transient=True, expand=True, speed_estimate_period=SPEED_WINDOW_S,
            get_time=get_time)
        self.row: TaskID = self.progress.add_task("starting", total=None, detail="")
        self.phase: str | None = None
        self.step: dict | None = None  # the latest step line's row (parse_step_line), None before one

    def __enter__(self) -> RunView:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    @contextlib.contextmanager
    def attached(self) -> Iterator[RunView]:
        """Receive every record reaching the root logger and the :data:`PHASE_LOGGER` records, and silence
        Prefect's console handlers, for the block; everything is as it was after it. Imports Prefect and sets up its
        logging if that was not done yet."""
        from prefect.logging.configuration import ensure_logging_setup
        from prefect.logging.handlers import PrefectConsoleHandler

        ensure_logging_setup()  # Prefect's handlers exist before they are looked for (a no-op once set up)
        root = logging.getLogger()
        consoles = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
        level = PHASE_LOGGER.level
        for handler in consoles:
            handler.addFilter(_drop)
        PHASE_LOGGER.setLevel(logging.INFO)
        root.addHandler(self)
        try:
            yield self
        finally:
            root.removeHandler(self)
            PHASE_LOGGER.setLevel(level)
            for handler in consoles:
                handler.removeFilter(_drop)

    def emit(self, record: logging.LogRecord) -> None:
        """Route one record (module docstring); a record that cannot be shown goes to ``handleError``."""
        try:
            if record.name == PHASE_LOGGER.name and hasattr(record, "phase_state"):
                if record.phase_state == "started":
                    self.started(record.phase)
                else:
                    self.ended(record.phase, record.phase_state, record.phase_s)
            elif record.levelno >= logging.WARNING:
                self.warn(record)
            elif record.name.startswith(RUN_LOGGERS):
                task = getattr(record, "task_name", None)
                if task == TaskName.train:  # a batch of the launch's lines, one a line (tasks/train.py)
                    for line in record.getMessage().splitlines():
                        self.train_line(line)
                else:
                    self.message(task, record.getMessage())
        except Exception:  # noqa: BLE001 - logging's contract: a handler never raises into the code that logs
            self.handleError(record)

    def started(self, task: str) -> None:
        """Task ``task`` started: the live row shows it (for training: the bar, at step 0 of ``total_steps``)."""
        self.phase = task
        total = self.total_steps if task == TaskName.train else None
        self.step = None
        self.progress.reset(self.row, total=total, description=task, detail="")

    def ended(self, task: str, state: str, seconds: float) -> None:
        """Task ``task`` ended in ``state`` (completed | cached | failed | cancelled) after ``seconds``: its status
        line, above the live row (training's with its last step, loss and tokens/s)."""
        line = f"{MARKS.get(state, '?')} {task:<16} {seconds:6.1f} s"
        if state != "completed":
            line += f"  {state}"
        if task == TaskName.train and self.step is not None:
            line += f"  {self.step_text()}"
        self.progress.console.print(Text(line), highlight=False)
        self.phase = None
        self.progress.reset(self.row, total=None, description="…", detail="")

    def train_line(self, line: str) -> None:
        """One output line of training: a step line sets the bar (each step once, from the first rank to log it),
        a launch line restarts the count at the step it resumes from; the live row shows any other line until the
        first step."""
        launch = parse_launch_line(line)
        if launch is not None:
            self.step = None
            self.progress.reset(self.row, total=self.total_steps, completed=launch[1] or 0, description="train",
                                detail=line)
            return
        row = parse_step_line(line)
        if row is None:
            if self.step is None:
                self.progress.update(self.row, detail=line)
            return
        if self.step is not None and row["step"] <= self.step["step"]:
            return
        self.step = row
        self.progress.update(self.row, completed=row["step"], detail=self.step_text())

    def step_text(self) -> str:
        """``<step>/<total> steps · loss <nats, 4 decimals> · <tokens/s of all ranks> tokens/s`` of the latest step."""
        row = self.step
        return f"{row['step']}/{self.total_steps} steps · loss {row['loss']:.4f} · {row['tps'] * self.world_size:.0f} tokens/s"

    def message(self, task: str | None, text: str) -> None:
        """An INFO message of the flow (``task`` None) or of a task other than training: the live row's text, its
        last line that is not blank (the latest, for a batch of a launch's lines: the compile warm-up's); a task's
        message outside any task of the flow names the task."""
        if self.phase is None and task is not None:
            self.progress.update(self.row, description=task)
        lines = [line for line in text.splitlines() if line.strip()]
        self.progress.update(self.row, detail=lines[-1] if lines else "")

    def warn(self, record: logging.LogRecord) -> None:
        """A WARNING or above: its level, logger or task, and first line, printed above the live row."""
        where = getattr(record, "task_name", None) or getattr(record, "flow_run_name", None) or record.name
        text = record.getMessage().split("\n", 1)[0]
        self.progress.console.print(Text(f"{record.levelname} {where}: {text}"), highlight=False)


def _drop(_record: logging.LogRecord) -> bool:
    """A logging filter that drops every record."""
    return False
