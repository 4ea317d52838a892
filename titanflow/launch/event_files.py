"""The run's metrics from torchtitan's TensorBoard event files, read with tensorboard's own reader.

titan_cfg.trainer_config turns torchtitan's TensorBoard logger on. Its metrics rank (rank 0 without pipeline
parallelism) writes, every step, the scalars of ``MetricsProcessor.log`` to
``<run>/train/tb/<YYYYmmdd-HHMM>/events.out.tfevents.<time>.<host>.<pid>.<n>``: one file per launch, closed when
the trainer closes. The tags read (:data:`TAGS`) are the same at every snapshot of the torchtitan window and in 0.3.0.
A scalar is stored as a float32 (``simple_value``); the table holds that float32's exact value, the precision the
event file holds (the console line rounds the loss to 5 decimals and has no step time).

A run of several launches (a retried or resumed training, titanflow.launch.resume) has one file per launch; the curve
folds them as titanflow.launch.metrics.metrics_table folds train.log's launches: a later launch whose first step is k
replaces what earlier launches logged from step k on.

:func:`run_metrics` says which source the run's table came from: the event files, or the console line
(titanflow.launch.metrics) with why (no event files, no loss in them, or steps the console logged that they lack:
a launch killed before its writer flushed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from titan_cfg.job import TB_FOLDER
from titanflow.launch.metrics import COLUMNS, run_curve, step_spans

if TYPE_CHECKING:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

#: Column of the metrics table (titanflow.launch.metrics.COLUMNS) -> the tag torchtitan's MetricsProcessor.log
#: writes it under (torchtitan/components/metrics.py).
TAGS: dict[str, str] = {
    "loss": "loss_metrics/global_avg_loss",
    "grad_norm": "grad_norm",
    "memory_gib": "memory/max_reserved(GiB)",
    "tps": "throughput(tps)",
    "tflops": "tflops",
    "mfu_pct": "mfu(%)",
    "step_time_s": "time_metrics/end_to_end(s)",
}

#: metrics_source of a run whose table came from the event files (else ``console line: <why>``).
TENSORBOARD = "tensorboard"


def tb_dir(dump_folder: Path) -> Path:
    """Where torchtitan writes a run's event files: ``<dump_folder>/tb`` (titan_cfg.job.TB_FOLDER)."""
    return Path(dump_folder) / TB_FOLDER


def _accumulators(folder: Path) -> list[EventAccumulator]:
    """Every event file under ``folder`` loaded, oldest launch first (by its first event's time); a file with no
    event yet (created, nothing flushed) is left out."""
    # tensorboard's own reader (tensorboard comes with torchtitan, which requires it): it reads the records, checks
    # their CRCs and stops at a record still being written, which a parser of titanflow's own would have to repeat.
    # Imported here: about a second of imports (protobuf, numpy) that the flows' import of the train task skips.
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    loaded = []
    for path in sorted(Path(folder).rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 0})  # 0: every step, none sampled away
        accumulator.Reload()
        try:
            loaded.append((accumulator.FirstEventTimestamp(), accumulator))
        except ValueError:  # no event in the file
            continue
    return [accumulator for _, accumulator in sorted(loaded, key=lambda pair: pair[0])]


def file_rows(accumulator: EventAccumulator) -> dict[int, dict]:
    """One event file's steps: {step: row of :data:`COLUMNS`}, NaN for a tag the file lacks at that step; only steps
    with a loss."""
    tags = set(accumulator.Tags()["scalars"])
    values = {column: {event.step: float(event.value) for event in accumulator.Scalars(tag)}
              for column, tag in TAGS.items() if tag in tags}
    return {step: {"step": step, **{column: values.get(column, {}).get(step, math.nan) for column in TAGS}}
            for step in sorted(values.get("loss", {}))}


def events_table(folder: Path) -> pd.DataFrame:
    """The run's curve from the event files under ``folder`` (:func:`tb_dir`), one row per step (columns
    :data:`titanflow.launch.metrics.COLUMNS`), launches folded (module docstring); empty when there are none."""
    rows: dict[int, dict] = {}
    for accumulator in _accumulators(folder):
        logged = file_rows(accumulator)
        if logged:
            first = min(logged)
            rows = {step: row for step, row in rows.items() if step < first} | logged
    return pd.DataFrame([rows[step] for step in sorted(rows)], columns=COLUMNS)


def run_metrics(log_path: Path, folder: Path) -> tuple[pd.DataFrame, str]:
    """(the run's metrics table, its source): the event files' table under ``folder`` (:func:`tb_dir`) and
    :data:`TENSORBOARD` when they hold every step train.log's console lines (``log_path``) hold; else the console
    lines' table (titanflow.launch.metrics.run_curve) and ``console line: <why>``."""
    console = run_curve(log_path)
    shown = f"{Path(folder).parent.name}/{Path(folder).name}"
    if not (Path(folder).is_dir() and any(Path(folder).rglob("events.out.tfevents.*"))):
        return console, f"console line: no TensorBoard event files under {shown} (torchtitan's logger was off)"
    events = events_table(folder)
    if events.empty:
        return console, f"console line: the event files under {shown} hold no {TAGS['loss']} scalar"
    lacking = sorted(set(console.step) - set(events.step))
    if lacking:
        return console, (f"console line: the event files under {shown} lack steps {step_spans(lacking)} that train.log "
                         "has (a launch ended before its writer flushed them)")
    return events, TENSORBOARD

