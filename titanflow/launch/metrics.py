"""Read torchtitan's output: per-step metric lines into a table, and the tail of a run's log.

torchtitan 0.3.0's MetricsProcessor logs, every ``log_freq`` steps on each rank:
``step:  1  loss: 11.95009  grad_norm:  1.1346  memory:  0.98GiB(4.14%)  tps: 25 ...``
with ANSI colours; torchrun's ``--tee`` may prefix ``[default0]:``. Rank 0's line
is the one kept (the launcher shows only local rank 0 on the console).
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
)

#: Columns of the metrics table: step (1-based), loss (nats), grad_norm (L2),
#: memory_gib (peak per rank, GiB: CUDA reserved, or peak RSS on the cpu target), tps (tokens/s per rank).
COLUMNS = ["step", "loss", "grad_norm", "memory_gib", "tps"]


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes."""
    return _ANSI.sub("", line)


def parse_step_line(line: str) -> dict | None:
    """One metric row from a log line, or None when the line is not a step line."""
    match = _STEP.search(strip_ansi(line))
    if match is None:
        return None
    row = match.groupdict()
    return {
        "step": int(row["step"]),
        "loss": float(row["loss"]),
        "grad_norm": float(row["grad_norm"]) if row["grad_norm"] is not None else float("nan"),
        "memory_gib": float(row["memory_gib"]),
        "tps": float(row["tps"].replace(",", "")),
    }


def metrics_table(lines: list[str]) -> pd.DataFrame:
    """Table of every step line in ``lines``; a step logged twice keeps its first line."""
    rows = [row for row in map(parse_step_line, lines) if row is not None]
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.drop_duplicates("step", keep="first").sort_values("step").reset_index(drop=True)


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


def logged_losses(metrics_path: Path) -> list[float]:
    """Losses (nats, step 1 first) of the steps in the metrics table at ``metrics_path``
    (``runs/<id>/metrics.csv``, which titanflow.launch.torchrun writes also when training is stopped
    or fails); [] when there is no table or it has no step."""
    if not metrics_path.is_file() or not metrics_path.stat().st_size:
        return []
    table = pd.read_csv(metrics_path)
    return [float(x) for x in table.sort_values("step").loss] if "loss" in table else []
