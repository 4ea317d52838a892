"""Run history: one row per scenario run in a parquet table that outlives the runs.

    from titanflow.record import history
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

Columns: the fields of titanflow.history_row.HistoryRow (units in the names and descriptions), built from the run
record by :func:`row_from_summary`. Every table of the history folder carries its ``schema_version`` in its
metadata; tables of earlier versions are read as the current one (titanflow.record.schema).
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, get_args

import pandas as pd
from filelock import FileLock
from pydantic import BaseModel, ValidationError

from titan_cfg.targets import node_of
from titanflow import paths
from titanflow.history_row import DTYPES, HistoryRow, extra
from titanflow.judge.environment import environment_key, hardware
from titanflow.judge.workload import config_key
from titanflow.launch.metrics import log_tail, logged_losses
from titanflow.launch.resume import launches
from titanflow.record.schema import NewerVersionError, mark_history, upgrade_history, world_size
from titanflow.record.summary import RunSummary, classify, read_summary

#: File name of the history table inside the history folder.
HISTORY_FILE = "runs.parquet"

#: Seconds an append waits for the lock before failing (an append itself takes well under a second).
LOCK_TIMEOUT_S = 120.0

#: Packages whose versions each row records.
VERSIONED_PACKAGES = ("torch", "torchtitan", "transformers", "prefect")

#: Lines of train.log given to the failure classifier.
LOG_TAIL_LINES = 60

#: The columns the run record fills as they are, and from where: a column's ``source`` (titanflow.history_row: a
#: dotted path, ``train.tokens_per_s``), else the RunSummary field of its name. :func:`row_from_summary` computes
#: the others, and replaces ``verdict``'s None.
SOURCES: dict[str, str] = {
    name: extra(field).get("source", name) for name, field in HistoryRow.model_fields.items()
    if "source" in extra(field) or name in RunSummary.model_fields or name in RunSummary.model_computed_fields}

def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``TrainResult | None`` -> TrainResult); None for any other type."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def source_problems() -> list[str]:
    """Every ``source`` of :data:`SOURCES` that names no field of the run record, each with its fix; [] when each
    names one. A source that reaches a mapping (``task_peak_rss_bytes.validate``) is checked up to it."""
    problems = []
    for column, source in SOURCES.items():
        model: type[BaseModel] | None = RunSummary
        for part in source.split("."):
            if model is None:  # a mapping (or a value) on the way: its keys are the run's
                break
            fields = model.model_fields | model.model_computed_fields
            if part not in fields:
                problems.append(f"HistoryRow.{column}: its source {source!r} names no field {part!r} of "
                                f"{model.__name__}; fix: one of {', '.join(fields)}")
                break
            field = fields[part]
            model = _model_of(getattr(field, "annotation", None) or getattr(field, "return_type", None))
    return problems


def unfilled_columns(row: HistoryRow) -> list[str]:
    """Every column of :class:`HistoryRow` that :func:`row_from_summary` left to its default in ``row`` (one it
    built): neither copied from the run record (:data:`SOURCES`) nor computed there, each with its fix."""
    return [f"HistoryRow.{name}: nothing fills it; fix: name it as the RunSummary field it copies, give it a "
            "\"source\" (a dotted path into the run record), or compute it in row_from_summary"
            for name in HistoryRow.model_fields if name not in row.model_fields_set]


def history_file(history_dir: Path | str | None = None, name: str = HISTORY_FILE) -> Path:
    """``<history_dir>/<name>`` (default ``runs.parquet``); ``None``: :func:`titanflow.paths.history_root`."""
    return (Path(history_dir).resolve() if history_dir else paths.history_root()) / name


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


def _losses(summary: RunSummary, run_dir: Path) -> list[float]:
    """Per-step losses: the summary's (a finished or cancelled training), else metrics.csv's (the train
    task failed before the flow kept them)."""
    if summary.losses:
        return [float(x) for x in summary.losses]
    return logged_losses(run_dir / "metrics.csv")


def run_failure_class(summary: RunSummary, run_dir: Path, losses: list[float] | None = None) -> str | None:
    """The run's failure class as its history row records it (titanflow.record.summary.classify of the summary,
    the last :data:`LOG_TAIL_LINES` lines of its train.log and its losses, read here unless given); None for a run
    that passed."""
    losses = _losses(summary, run_dir) if losses is None else losses
    return classify(summary, log_tail(run_dir / "train.log", LOG_TAIL_LINES) or "", losses)


def _from_summary(summary: RunSummary, source: str):
    """The value at ``source`` (a dotted path of fields and mapping keys) of ``summary``; None where a part on the
    way is None (a run that never trained has no ``train``) or a mapping lacks the key."""
    value = summary
    for name in source.split("."):
        value = value.get(name) if isinstance(value, dict) else getattr(value, name)
        if value is None:
            return None
    return value


def _utc(stamp: datetime) -> pd.Timestamp:
    """A time as a UTC timestamp (a time without zone is taken as UTC)."""
    stamp = pd.Timestamp(stamp)
    return stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")


def _times(summary: RunSummary, summary_path: Path) -> tuple[pd.Timestamp, pd.Timestamp]:
    """(started, finished) in UTC: the summary's own fields when present, else from the file's mtime."""
    finished = (_utc(summary.finished_at) if summary.finished_at
                else pd.Timestamp(datetime.fromtimestamp(summary_path.stat().st_mtime, tz=timezone.utc)))
    started = (_utc(summary.started_at) if summary.started_at
               else finished - timedelta(seconds=summary.total_s))
    return started, finished


def row_from_summary(summary_path: Path | str, summary: RunSummary | None = None) -> HistoryRow:
    """One history row from a run's ``summary.json`` (``summary``: the record in hand, the file as already read or
    one that could not be written: a full disk) and the files next to it.

    Raises:
        FileNotFoundError: no summary at ``summary_path`` and none given.
        ValueError: the file is not a titanflow summary (pydantic's error names the fields).
    """
    summary_path = Path(summary_path).resolve()
    if summary is None and not summary_path.is_file():
        raise FileNotFoundError(f"summary_path: {summary_path} does not exist; fix: pass runs/<run-id>/summary.json")
    try:
        summary = summary or read_summary(summary_path)
    except ValidationError as err:
        raise ValueError(f"summary_path: {summary_path} is not a titanflow summary.json: {err}") from None
    run_dir = summary_path.parent
    losses = _losses(summary, run_dir)
    started, finished = _times(summary, summary_path)
    commit, dirty = git_state()
    train = summary.train
    launched = launches(run_dir / "train.log")  # also when training failed: then there is no train result
    copied = {column: _from_summary(summary, source) for column, source in SOURCES.items()}
    return HistoryRow(**copied | dict(
        config_key=config_key(summary.parameters),
        parameters=json.dumps(summary.parameters, sort_keys=True, default=str),
        started_at=started, finished_at=finished,
        verdict=summary.verdict or ("fail" if summary.failed_task else "unknown"),
        failure_class=run_failure_class(summary, run_dir, losses),
        first_step_loss=losses[0] if losses else None, final_loss=losses[-1] if losses else None,
        losses=losses,
        **{f"seconds_{task}": float(s) for task, s in summary.timings_s.items()},
        **package_versions(), git_commit=commit, git_dirty=dirty,
        nproc=world_size(run_dir, summary.parameters),
        run_dir=str(run_dir),
        environment_key=environment_key(summary.environment),
        stack_digest=(summary.stack or {}).get("digest"),
        hardware=hardware(node_of(summary.target), summary.environment),
        resumed_from_step=train.resumed_from_step if train else (launched[-1][1] if launched else None),
        attempts=train.attempts if train else (len(launched) or None),
    ))


class HistoryError(RuntimeError):
    """The history table cannot be read; the message names it and the command that sets it aside."""


class NewerHistoryError(HistoryError):
    """The history table is of a newer version than this titanflow reads (titanflow.record.schema); the message
    names both versions. It is not damaged, so it is never set aside for it."""


def _read_table(table: Path) -> pd.DataFrame:
    """The parquet table read through one open file, in the current version (titanflow.record.schema).

    pyarrow given a path may open it more than once (footer, then pages); an append
    replacing the file in between makes it read pages of one file against the footer of
    another ("Unexpected end of stream", seen with concurrent appends). An open file keeps
    the inode it opened, so a reader sees one complete version.
    """
    with open(table, "rb") as handle:
        try:
            df = pd.read_parquet(handle)
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            where = "" if table.parent == paths.history_root() else f" --history-dir {table.parent}"
            fix = (f"titanflow history --set-aside{where}" if table.name == HISTORY_FILE
                   else f"rename {table.name} to {table.name}.set-aside-<UTC time>")
            raise HistoryError(f"history: {table} cannot be read ({err}); it is left as it is. "
                               f"Set it aside (kept, renamed) and start a new one: {fix}") from err
    try:
        return upgrade_history(df, str(table))
    except NewerVersionError as err:
        raise NewerHistoryError(f"history: {err}; it is left as it is") from None


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with stable dtypes: the row's ``int`` columns as nullable integers
    (titanflow.history_row.DTYPES), the rest as pandas infers them (UTC timestamps among them)."""
    df = pd.DataFrame(rows)
    for column, dtype in DTYPES.items():
        if column in df:
            df[column] = df[column].astype(dtype)
    return df


def append_rows(rows: list[dict], history_dir: Path | str | None = None, name: str = HISTORY_FILE,
                key: str = "run_id") -> Path:
    """Add ``rows`` to the history table (``name``: another table of the history folder, such as the bisects')
    under the lock (module docstring); returns the table's path.

    A row whose ``key`` is already in the table replaces it. The table's columns keep their order, a new column
    after them (also when every row is replaced).

    Raises:
        filelock.Timeout: another append held the lock for :data:`LOCK_TIMEOUT_S`.
        HistoryError: the table exists but cannot be read.
    """
    table = history_file(history_dir, name)
    table.parent.mkdir(parents=True, exist_ok=True)
    new = _frame(rows)
    with FileLock(str(table.with_name(f".{table.name}.lock")), timeout=LOCK_TIMEOUT_S):
        if table.is_file():
            old = _read_table(table)
            kept = old[~old[key].isin(new[key])]
            new = pd.concat([kept, new], ignore_index=True) if len(kept) else new
            new = new[[c for c in old.columns if c in new] + [c for c in new.columns if c not in old.columns]]
        paths.write_atomic(table, mark_history(new).to_parquet(index=False))
    return table


def append_run(summary_path: Path | str, history_dir: Path | str | None = None,
               summary: RunSummary | None = None) -> HistoryRow:
    """Append the run of ``summary_path`` (``summary``: its record in hand, as :func:`row_from_summary`) to the history
    (:func:`append_rows`); returns its row."""
    row = row_from_summary(summary_path, summary)
    append_rows([row.as_record()], history_dir)
    return row


class ReadableHistoryError(ValueError):
    """A table that reads fine was to be set aside without ``force``; the message names it and the fix."""


def set_aside(history_dir: Path | str | None = None, force: bool = False) -> Path | None:
    """Rename the history table to ``runs.parquet.set-aside-<UTC time>`` beside it (kept, never deleted),
    so the next append starts a new table; returns the new name, or None when there is no table. Only a
    table that cannot be read is set aside, unless ``force``: the next run would start an empty history,
    and the trends, baselines and comparisons would lose every earlier run.

    Raises:
        ReadableHistoryError: the table reads fine and ``force`` is False (naming it and its runs).
        NewerHistoryError: the table is of a newer version and ``force`` is False.
        filelock.Timeout: an append held the lock for :data:`LOCK_TIMEOUT_S`.
    """
    table = history_file(history_dir)
    with FileLock(str(table.with_name(f".{table.name}.lock")), timeout=LOCK_TIMEOUT_S):
        if not table.is_file():
            return None
        if not force:
            try:
                runs = len(_read_table(table))
            except NewerHistoryError:
                raise  # a newer titanflow reads it
            except HistoryError:
                runs = None  # what --set-aside is for
            if runs is not None:
                raise ReadableHistoryError(
                    f"set_aside: {table} reads fine ({runs} run(s)); setting it aside would start the next run on an "
                    "empty history. Set aside only a table that cannot be read; to start a new one anyway: "
                    "titanflow history --set-aside --force (the table is kept, renamed)")
        kept = table.with_name(f"{table.name}.set-aside-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
        table.rename(kept)
    return kept


def read_table(name: str, history_dir: Path | str | None = None) -> pd.DataFrame:
    """The table ``name`` of the history folder as written (no lock needed: it is only ever replaced whole);
    empty (no columns) when there is none.

    Raises:
        HistoryError: the table exists but cannot be read.
    """
    table = history_file(history_dir, name)
    return _read_table(table) if table.is_file() else pd.DataFrame()


def read_history(scenario: str | None = None, target: str | None = None, init: str | None = None,
                 history_dir: Path | str | None = None) -> pd.DataFrame:
    """The history table, optionally filtered, oldest run first; empty (no columns) when nothing was appended.

    ``losses`` holds plain lists of floats. Reading needs no lock: the table is only ever replaced whole.

    Raises:
        HistoryError: the table exists but cannot be read (the message says how to set it aside).
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
