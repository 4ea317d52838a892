"""Run history: one row per scenario run in a parquet table that outlives the runs.

    from titanflow import history
    row = history.append_run("runs/<run-id>/summary.json")        # after each run (the nightly suite)
    df = history.read_history(scenario="native", target="cpu", init="random")

The table is ``<history dir>/runs.parquet`` (``$TITANFLOW_HISTORY`` or
``<repo>/history``, :func:`titanflow.paths.history_root`). An append takes a
``filelock`` lock on ``.runs.parquet.lock`` (hidden, so ``pandas.read_parquet`` of the folder
skips it, as it skips the temporary file), reads the table, adds the row (a
run_id already present is replaced, so re-appending a run is harmless), writes
a temporary sibling, fsyncs it and ``os.replace``-s it over the table: readers
never see a half-written file and concurrent appenders never lose a row.
Rewriting the whole table per append is fine at nightly scale (hundreds of rows
per year, a few KiB each).

Columns (one row per run; units in the name):

| column | type | from |
|---|---|---|
| run_id, flow_run_id, scenario, target, init | str | summary.json |
| config_key | str | hash of the parameters that define the workload (:data:`CONFIG_KEY_FIELDS`) |
| parameters | str (JSON) | summary.json ``parameters`` |
| started_at, finished_at | timestamp (UTC) | summary.json ``started_at``/``finished_at`` when present, else summary.json's modification time and that minus ``total_s`` |
| verdict, failed_task, error, reason | str | summary.json (``reason``: why the verdict, e.g. a loss-curve regression) |
| failure_class | str or null | :func:`titanflow.failures.classify` (summary + tail of train.log) |
| first_step_loss, final_loss | float (nats) | losses[0], losses[-1] |
| losses | list[float] (nats, step 1 first) | summary.json, else the run's metrics.csv (a run whose train task failed) |
| tokens_per_s | float | summary.json (all ranks) |
| peak_memory_gib, peak_rss_bytes | float, int | summary.json |
| compile_warmup_s | float | summary.json ``compile_warmup.seconds`` |
| seconds_<task>, total_s | float (s) | summary.json ``timings_s`` / ``total_s`` |
| torch_version, torchtitan_version, transformers_version, prefect_version | str | summary.json ``versions`` when present, else importlib.metadata of the appending environment |
| git_commit, git_dirty | str, bool | summary.json when present, else ``git`` in the repository at append time |
| nproc, steps | int | job/launch.json ``--nproc_per_node`` (else parameters), summary.json |
| run_dir | str | the summary's folder |
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from titanflow import paths
from titanflow.failures import classify

#: File name of the history table inside the history folder.
HISTORY_FILE = "runs.parquet"

#: Seconds an append waits for the lock before failing (an append itself takes well under a second).
LOCK_TIMEOUT_S = 120.0

#: Packages whose versions each row records.
VERSIONED_PACKAGES = ("torch", "torchtitan", "transformers", "prefect")

#: Parameters (ScenarioRun fields) that define the workload: runs compare (golden curve, history
#: medians) only with runs of the same scenario, target, init and these. The numerics knobs (lr,
#: warmup_steps, seed) are left out on purpose: a changed learning rate is what the loss-curve rule
#: must catch, not a reason to skip it; run_id, runs_dir, timeout_s, tolerances and export_dtype
#: change neither the curve nor the speed of training.
CONFIG_KEY_FIELDS = ("weights", "steps", "global_batch_size", "seq_len", "nproc", "compile")

#: Lines of train.log given to the failure classifier.
LOG_TAIL_LINES = 60


def history_file(history_dir: Path | str | None = None) -> Path:
    """``<history_dir>/runs.parquet``; ``None``: :func:`titanflow.paths.history_root`."""
    return Path(history_dir).resolve() / HISTORY_FILE if history_dir else paths.history_root() / HISTORY_FILE


def config_key(parameters: dict) -> str:
    """12 hex digits of sha256 over the :data:`CONFIG_KEY_FIELDS` of ``parameters`` (absent = None)."""
    chosen = {name: parameters.get(name) for name in CONFIG_KEY_FIELDS}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]


def package_versions() -> dict[str, str | None]:
    """{``<package>_version``: installed version or None} for :data:`VERSIONED_PACKAGES`."""
    found = {}
    for name in VERSIONED_PACKAGES:
        try:
            found[f"{name}_version"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[f"{name}_version"] = None
    return found


def git_state(repo: Path = paths.REPO_ROOT) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether tracked files differ from it) of ``repo``; (None, None) outside a git checkout."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` ("" when it does not exist)."""
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _losses(summary: dict, run_dir: Path) -> list[float]:
    """Per-step losses: the summary's, else metrics.csv's (the train task failed before the flow kept them)."""
    if summary.get("losses"):
        return [float(x) for x in summary["losses"]]
    metrics = run_dir / "metrics.csv"
    if metrics.is_file() and metrics.stat().st_size:
        table = pd.read_csv(metrics)
        if "loss" in table:
            return [float(x) for x in table.sort_values("step").loss]
    return []


def _nproc(summary: dict, run_dir: Path) -> int | None:
    """World size: ``--nproc_per_node`` of the launched torchrun line (job/launch.json), else the parameter."""
    launch = run_dir / "job" / "launch.json"
    if launch.is_file():
        for arg in json.loads(launch.read_text()).get("argv", []):
            match = re.fullmatch(r"--nproc[_-]per[_-]node=(\d+)", str(arg))
            if match:
                return int(match.group(1))
    return (summary.get("parameters") or {}).get("nproc")


def _utc(value: str) -> pd.Timestamp:
    """An ISO time as a UTC timestamp (a time without zone is taken as UTC)."""
    stamp = pd.Timestamp(value)
    return stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")


def _times(summary: dict, summary_path: Path) -> tuple[pd.Timestamp, pd.Timestamp]:
    """(started, finished) in UTC: the summary's own fields when present, else from the file's mtime."""
    finished = (_utc(summary["finished_at"]) if summary.get("finished_at")
                else pd.Timestamp(datetime.fromtimestamp(summary_path.stat().st_mtime, tz=timezone.utc)))
    started = (_utc(summary["started_at"]) if summary.get("started_at")
               else finished - timedelta(seconds=float(summary.get("total_s") or 0.0)))
    return started, finished


def row_from_summary(summary_path: Path | str) -> dict[str, Any]:
    """One history row (module docstring) from a run's ``summary.json`` and the files next to it.

    Raises:
        FileNotFoundError: no summary at ``summary_path``.
        ValueError: the summary lacks run_id, scenario, target or init (it is not a titanflow summary).
    """
    summary_path = Path(summary_path).resolve()
    if not summary_path.is_file():
        raise FileNotFoundError(f"summary_path: {summary_path} does not exist; pass runs/<run-id>/summary.json")
    summary = json.loads(summary_path.read_text())
    missing = [k for k in ("run_id", "scenario", "target", "init") if not summary.get(k)]
    if missing:
        raise ValueError(f"summary_path: {summary_path} lacks {', '.join(missing)}; is it a titanflow summary.json?")
    run_dir = summary_path.parent
    losses = _losses(summary, run_dir)
    parameters = summary.get("parameters") or {}
    started, finished = _times(summary, summary_path)
    commit, dirty = (summary["git_commit"], summary.get("git_dirty")) if summary.get("git_commit") else git_state()
    versions = {f"{k}_version": v for k, v in summary["versions"].items()} if summary.get("versions") \
        else package_versions()
    row: dict[str, Any] = {
        "run_id": summary["run_id"], "flow_run_id": summary.get("flow_run_id"),
        "scenario": summary["scenario"], "target": summary["target"], "init": summary["init"],
        "config_key": config_key(parameters), "parameters": json.dumps(parameters, sort_keys=True, default=str),
        "started_at": started, "finished_at": finished,
        "verdict": summary.get("verdict") or ("fail" if summary.get("failed_task") else "unknown"),
        "failure_class": classify(summary | {"losses": losses}, _log_tail(run_dir / "train.log")),
        "failed_task": summary.get("failed_task"), "error": summary.get("error"), "reason": summary.get("reason"),
        "first_step_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "losses": losses,
        "tokens_per_s": summary.get("tokens_per_s"), "peak_memory_gib": summary.get("peak_memory_gib"),
        "peak_rss_bytes": summary.get("peak_rss_bytes"),
        "compile_warmup_s": (summary.get("compile_warmup") or {}).get("seconds"),
        **{f"seconds_{task}": float(s) for task, s in (summary.get("timings_s") or {}).items()},
        "total_s": summary.get("total_s"),
        **versions, "git_commit": commit, "git_dirty": dirty,
        "nproc": _nproc(summary, run_dir), "steps": summary.get("steps") or parameters.get("steps"),
        "run_dir": str(run_dir),
    }
    return row


def _read_table(table: Path) -> pd.DataFrame:
    """The parquet table read through one open file.

    pyarrow given a path may open it more than once (footer, then pages); an append
    replacing the file in between makes it read pages of one file against the footer of
    another ("Unexpected end of stream", seen with concurrent appends). An open file keeps
    the inode it opened, so a reader sees one complete version.
    """
    with open(table, "rb") as handle:
        return pd.read_parquet(handle)


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with stable dtypes (nullable integers, UTC timestamps)."""
    df = pd.DataFrame(rows)
    for column in ("peak_rss_bytes", "nproc", "steps"):
        if column in df:
            df[column] = df[column].astype("Int64")
    return df


def append_rows(rows: list[dict], history_dir: Path | str | None = None) -> Path:
    """Add ``rows`` to the history table under the lock (module docstring); returns the table's path.

    A row whose run_id is already in the table replaces it.

    Raises:
        filelock.Timeout: another append held the lock for :data:`LOCK_TIMEOUT_S`.
    """
    table = history_file(history_dir)
    table.parent.mkdir(parents=True, exist_ok=True)
    new = _frame(rows)
    with FileLock(str(table.with_name(f".{table.name}.lock")), timeout=LOCK_TIMEOUT_S):
        if table.is_file():
            old = _read_table(table)
            kept = old[~old.run_id.isin(new.run_id)]
            new = pd.concat([kept, new], ignore_index=True) if len(kept) else new
        tmp = table.with_name(f".{table.name}.{os.getpid()}.tmp")
        new.to_parquet(tmp, index=False)
        with open(tmp, "rb") as written:  # on disk before it replaces the table
            os.fsync(written.fileno())
        os.replace(tmp, table)
    return table


def append_run(summary_path: Path | str, history_dir: Path | str | None = None) -> dict[str, Any]:
    """Append the run of ``summary_path`` to the history (:func:`row_from_summary`, :func:`append_rows`); returns its row."""
    row = row_from_summary(summary_path)
    append_rows([row], history_dir)
    return row


def read_history(scenario: str | None = None, target: str | None = None, init: str | None = None,
                 history_dir: Path | str | None = None) -> pd.DataFrame:
    """The history table, optionally filtered, oldest run first; empty (no columns) when nothing was appended.

    ``losses`` holds plain lists of floats. Reading needs no lock: the table is only ever replaced whole.
    """
    table = history_file(history_dir)
    if not table.is_file():
        return pd.DataFrame()
    df = _read_table(table)
    df["losses"] = df["losses"].map(lambda x: [float(v) for v in x] if x is not None else [])
    for column, value in (("scenario", scenario), ("target", target), ("init", init)):
        if value is not None:
            df = df[df[column] == value]
    return df.sort_values("finished_at", kind="stable").reset_index(drop=True)
