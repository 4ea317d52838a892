"""History rows built by hand (titanflow.history_row.HistoryRow), for tests of what reads the history:
a run of a given night with given metrics, without training it."""

from __future__ import annotations

import json

import pandas as pd

from titanflow.history_row import HistoryRow

#: Per-step losses of a real run: native, cpu, random init, 10 steps (tests/fixtures/run_folders/native-cpu-random).
NATIVE_CPU_RANDOM_LOSSES = [11.94006, 11.93394, 11.89889, 11.85279, 11.8061,
                            11.71372, 11.69535, 11.65731, 11.63609, 11.62677]


def history_row(run_id: str, day: int, *, scenario: str = "native", init: str = "random", target: str = "cpu",
                hour: int = 2, config_key: str = "k10", verdict: str = "pass", failure_class: str | None = None,
                losses: list[float] | None = None, tokens_per_s: float | None = 600.0,
                peak_memory_gib: float | None = 1.0, total_s: float = 60.0, lr: float = 8e-4,
                torch_version: str = "2.13.0+cpu", **extra) -> dict:
    """One run started on 2026-12-<day> at <hour>:00 UTC and finished a minute later, as the history
    stores it (``HistoryRow.as_record``); ``extra``: more columns (``seconds_<task>``, ``git_commit``, ...)."""
    losses = NATIVE_CPU_RANDOM_LOSSES if losses is None else losses
    started = pd.Timestamp(f"2026-12-{day:02d} {hour:02d}:00", tz="UTC")
    parameters = {"scenario": scenario, "target": target, "init": init, "steps": len(losses) or 10, "lr": lr,
                  "run_id": run_id}
    fields = {
        "run_id": run_id, "flow_run_id": None, "scenario": scenario, "target": target, "init": init,
        "config_key": config_key, "parameters": json.dumps(parameters, sort_keys=True), "started_at": started,
        "finished_at": started + pd.Timedelta(minutes=1), "verdict": verdict, "failure_class": failure_class,
        "failed_task": None, "error": None, "reason": None,
        "first_step_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "losses": losses, "tokens_per_s": tokens_per_s, "peak_memory_gib": peak_memory_gib, "peak_rss_bytes": 2**30,
        "compile_warmup_s": 0.0, "total_s": total_s, "torch_version": torch_version, "torchtitan_version": "0.3.0",
        "transformers_version": "5.23.0", "prefect_version": "3.9.1", "git_commit": "c0ffee", "git_dirty": False,
        "nproc": 2, "steps": len(losses) or 10, "run_dir": f"/runs/{run_id}", "seconds_train": 40.0}
    return HistoryRow(**(fields | extra)).as_record()
