"""Read torchtitan's output: per-step metric lines into a table, and the tail of a run's log.

torchtitan 0.3.0's MetricsProcessor logs, every ``log_freq`` steps on each rank:
``step:  1  loss: 11.95009  grad_norm:  1.1346  memory:  0.98GiB(4.14%)  tps: 25  tflops: 0.01  mfu: 0.00%``
with ANSI colours; torchrun's ``--tee`` may prefix ``[default0]:``. Rank 0's line
is the one kept (the launcher shows only local rank 0 on the console). The line rounds (loss to 5 decimals, tps
to an integer, MFU to 2) and has no step time: the run's metrics come from torchtitan's TensorBoard event files
(titanflow.launch.event_files) and from this line only when those cannot serve (the record says why).

``train.log`` holds every launch of a run, one after the other, each opened by a launch line
(:func:`launch_line`, written by titanflow.launch.resume): ``titanflow: launch 2 resumes from step 3: ...``
or ``titanflow: launch 1 starts at step 1: ...``. The run's curve folds them (:func:`metrics_table`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf)\s+"
    r"(?:grad_norm:\s*(?P<grad_norm>[-+0-9.eE]+|nan|inf)\s+)?"
    r"memory:\s*(?P<memory_gib>[0-9.]+)GiB.*?tps:\s*(?P<tps>[0-9,]+)"
    r"(?:\s+tflops:\s*(?P<tflops>[0-9.,]+))?(?:\s+mfu:\s*(?P<mfu_pct>[0-9.]+)%)?"
)

#: Columns of the metrics table: step (1-based), loss (nats), grad_norm (L2),
#: memory_gib (peak per rank, GiB: CUDA reserved, or peak RSS on the cpu target), tps (tokens/s per rank),
#: tflops (per rank, from torchtitan's FLOPs per token), mfu_pct (model FLOPs utilization, % of the peak torchtitan
#: assumes for the device: an A100's 312 TFLOPs on a cpu), step_time_s (seconds per step since the last log:
#: torchtitan's time_metrics/end_to_end(s)). NaN where the source has no value (the console line has no step time;
#: torchtitan logs no MFU under quantization).
COLUMNS = ["step", "loss", "grad_norm", "memory_gib", "tps", "tflops", "mfu_pct", "step_time_s"]


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes."""
    return _ANSI.sub("", line)


def parse_step_line(line: str) -> dict | None:
    """One metric row (:data:`COLUMNS`) from a log line, or None when the line is not a step line; a value the line
    does not print is NaN (step_time_s always)."""
    match = _STEP.search(strip_ansi(line))
    if match is None:
        return None
    row = match.groupdict()

    def number(name: str) -> float:
        return float(row[name].replace(",", "")) if row[name] is not None else float("nan")

    return {
        "step": int(row["step"]),
        "loss": float(row["loss"]),
        "grad_norm": number("grad_norm"),
        "memory_gib": float(row["memory_gib"]),
        "tps": number("tps"),
        "tflops": number("tflops"),
        "mfu_pct": number("mfu_pct"),
        "step_time_s": float("nan"),
    }


_LAUNCH = re.compile(r"^titanflow: launch (?P<launch>\d+) (?:resumes from step (?P<step>\d+)|starts at step 1)")


def launch_line(launch: int, resumed_from: int | None, why: str) -> str:
    """The line that opens launch number ``launch`` (1-based) of a run in train.log: it resumes from the step
    checkpoint of step ``resumed_from``, or starts at step 1 (None); ``why`` says why, in words."""
    start = f"resumes from step {resumed_from}" if resumed_from is not None else "starts at step 1"
    return f"titanflow: launch {launch} {start}: {why}"


def parse_launch_line(line: str) -> tuple[int, int | None] | None:
    """(launch number, step resumed from or None) of a :func:`launch_line`, or None for any other line."""
    match = _LAUNCH.match(strip_ansi(line))
    if match is None:
        return None
    return int(match["launch"]), int(match["step"]) if match["step"] is not None else None


def metrics_table(lines: list[str]) -> pd.DataFrame:
    """The run's curve from its log lines in order: one row per step, from the step lines of the launches
    it is made of. A launch line (:func:`launch_line`) that resumes from step k (starts at step 1: k = 0) drops
    the rows earlier launches logged for steps after k, since the launch trains them again from step k's
    state; so a step logged twice keeps the later launch's line. Lines without launch lines are one launch."""
    rows: dict[int, dict] = {}
    for line in lines:
        launch = parse_launch_line(line)
        if launch is not None:
            resumed_from = launch[1] or 0
            rows = {step: row for step, row in rows.items() if step <= resumed_from}
        elif (row := parse_step_line(line)) is not None:
            rows[row["step"]] = row
    return pd.DataFrame([rows[step] for step in sorted(rows)], columns=COLUMNS)


def run_curve(train_log: Path) -> pd.DataFrame:
    """:func:`metrics_table` of the step and launch lines of a run's train.log (every launch; empty without a log)."""
    return metrics_table([line for line in log_lines(train_log) if parse_step_line(line) or parse_launch_line(line)])


def log_lines(path: Path, max_bytes: int = 4096):
    """Each line of the log at ``path`` in order, without its line end, cut to its first ``max_bytes`` bytes
    (decoded as UTF-8); the rest of a longer line is skipped unread into memory. Nothing when there is no log.
    A line of a child's output can be megabytes (titanflow.launch.process keeps it whole in the log)."""
    if not path.is_file():
        return
    with open(path, "rb") as log:
        while chunk := log.readline(max_bytes):
            if not chunk.endswith(b"\n"):  # longer than max_bytes: skip to its end
                while (rest := log.readline(max_bytes)) and not rest.endswith(b"\n"):
                    pass
            yield chunk.decode("utf-8", "replace").rstrip("\r\n")


#: Bytes read from the end of a log for its tail, and characters kept of each line of the tail: one
#: line of a child's output can be megabytes, and the tail goes into errors, the summary, the history
#: and the Prefect database.
TAIL_READ_BYTES, TAIL_LINE_CHARS = 1024 * 1024, 2000


def log_tail(path: Path, lines: int) -> str | None:
    """The last ``lines`` lines of the log at ``path`` without colour codes, or None when there is no log.

    Only the last :data:`TAIL_READ_BYTES` of the file are read (a line that starts before them begins
    with ``... ``), and a line longer than :data:`TAIL_LINE_CHARS` keeps its start and ends in
    `` ... [N characters cut]``: the result is at most ``lines`` x (:data:`TAIL_LINE_CHARS` + 30) characters.
    CR, LF and CRLF all end a line, as when the log is read as text.
    """
    if not path.is_file():
        return None
    with open(path, "rb") as log:
        start = max(0, log.seek(0, os.SEEK_END) - TAIL_READ_BYTES)
        log.seek(start)
        text = log.read().decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    found = text.removesuffix("\n").split("\n") if text else []
    if start and found:
        found[0] = f"... {found[0]}"
    return "\n".join(_cut(strip_ansi(line)) for line in found[-lines:])


def _cut(line: str) -> str:
    if len(line) <= TAIL_LINE_CHARS:
        return line
    return f"{line[:TAIL_LINE_CHARS]} ... [{len(line) - TAIL_LINE_CHARS} characters cut]"


def step_spans(steps: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"`` (sorted, distinct steps)."""
    spans: list[list[int]] = []
    for step in steps:
        if spans and step == spans[-1][-1] + 1:
            spans[-1][-1] = step
        else:
            spans.append([step, step])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def logged_losses(metrics_path: Path) -> list[float]:
    """Losses (nats, step 1 first) of the steps in the metrics table at ``metrics_path``
    (``runs/<id>/metrics.csv``, which titanflow.launch.torchrun writes also when training is stopped
    or fails); [] when there is no table or it has no step."""
    if not metrics_path.is_file() or not metrics_path.stat().st_size:
        return []
    table = pd.read_csv(metrics_path, float_precision="round_trip")  # each loss exactly as written
    return [float(x) for x in table.sort_values("step").loss] if "loss" in table else []
