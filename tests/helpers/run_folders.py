"""Run folders built by hand, as titanflow leaves them (summary.json, an export, a step checkpoint, train.log), for
tests of what reads a runs folder (titanflow.record.retention) without training."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from titanflow.record.summary import RunSummary

NOW = datetime.now(timezone.utc)  # the runs' ages count from the test session's start; none is within an hour of a limit
EXPORT_BYTES, CHECKPOINT_BYTES, LOG_BYTES = 3000, 5000, 100


def make_run(runs: Path, run_id: str, verdict: str | None, days_ago: float, steps: int = 10,
             export_bytes: int = EXPORT_BYTES) -> Path:
    """A run folder with a summary.json, an export, a step checkpoint and a log of the sizes above (the export
    ``export_bytes`` long instead, as a sparse file: no disk is used)."""
    folder = runs / run_id
    (folder / "export").mkdir(parents=True)
    with open(folder / "export" / "model.safetensors", "wb") as export:
        export.truncate(export_bytes)
    (folder / "train" / "checkpoint" / "step-10").mkdir(parents=True)
    (folder / "train" / "checkpoint" / "step-10" / "__0_0.distcp").write_bytes(b"c" * CHECKPOINT_BYTES)
    (folder / "train.log").write_bytes(b"l" * LOG_BYTES)
    finished = NOW - timedelta(days=days_ago)
    (folder / "summary.json").write_text(RunSummary(
        run_id=run_id, scenario="native", target="cpu", init="random", steps=steps, verdict=verdict,
        parameters={"scenario": "native", "target": "cpu", "init": "random", "steps": steps},
        started_at=finished - timedelta(minutes=2), finished_at=finished).model_dump_json())
    return folder
