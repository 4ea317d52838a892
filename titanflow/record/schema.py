"""The versions of the run record's files, and the one place that reads their older versions.

    data = upgrade_summary(json.loads(text))   # RunSummary does this before it validates a summary.json
    df = upgrade_history(pd.read_parquet(f))   # titanflow.record.history, for every table of the history folder

``summary.json`` (titanflow.record.summary.RunSummary) and the history folder's tables (titanflow.record.history)
carry ``schema_version``: a field of the JSON; a key of the parquet file's metadata for a table (pandas'
``DataFrame.attrs``, which ``pandas.to_parquet`` keeps and ``pandas.read_parquet`` gives back). A file without one
is version 1. Reading upgrades a file step by step to the current version; writing writes the current one. A file
of a newer version than this titanflow knows is refused, naming its version.

A change that only adds a field with a default (summary.json) or a column (a table: its earlier rows read the column
as missing) needs no new version. One that moves, renames or reinterprets what a file holds does: bump the version,
add the step from the one before to :data:`SUMMARY_STEPS` or :data:`HISTORY_STEPS`, and test it on a file of the old
version (tests/unit/record/test_schema.py).

| file | version | what it holds |
|---|---|---|
| summary.json | 1 | no ``schema_version``. Written before the record was typed: the results at the top level (``losses``, ``tokens_per_s``, ``export_dir``, ``first_step_loss``, ...); before the validation's load level was its own part: its keys in ``validation`` itself |
| | 2 | ``schema_version``; the results nested (``train``, ``export``, ``loss``), the load level in ``validation.load`` |
| a history table | 1 | no ``schema_version`` |
| | 2 | ``schema_version`` in the file's metadata; the columns as in version 1 |

Run folders written before the job file recorded the world size are read here too (:func:`world_size`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from titan_cfg.job import JOB_FILE

#: The version summary.json is written in.
SUMMARY_VERSION = 2

#: The version the history folder's tables are written in.
HISTORY_VERSION = 2

#: Where a file keeps its version: the JSON field, and the key of a table's metadata.
VERSION_KEY = "schema_version"

#: The load level's keys when they sat in a version-1 summary's ``validation`` itself
#: (titanflow.results.LoadReport's fields but its ``problems``).
_FLAT_LOAD_KEYS = ("missing_in_files", "missing", "unexpected", "mismatched", "tied", "lm_head_is_embedding",
                   "forward_finite")


class NewerVersionError(ValueError):
    """A file of a version newer than this titanflow reads; the message names both versions and the fix."""


def _nest_flat_results(data: dict) -> dict:
    """The task results of a summary written before the record was typed (at the top level), nested."""
    if "losses" not in data and "export_dir" not in data and "first_step_loss" not in data:
        return data
    data = dict(data)
    if "losses" in data and "train" not in data:
        data["train"] = {"log_path": data.pop("train_log", None), "metrics_path": None,
                         "losses": data.pop("losses"), "tokens_per_s": data.pop("tokens_per_s", None),
                         "peak_memory_gib": data.pop("peak_memory_gib", None),
                         "peak_rss_bytes": data.pop("peak_rss_bytes", None),
                         "wall_s": (data.get("timings_s") or {}).get("train", 0.0)}
    if "export_dir" in data and "export" not in data:
        data["export"] = {"export_dir": data.pop("export_dir"),
                          "untied_lm_head": data.pop("export_untied_lm_head", False)}
    if "first_step_loss" in data and "loss" not in data:
        data["loss"] = {name: data.pop(name, None) for name in
                        ("first_step_loss", "expected_first_step_loss", "tolerance", "expectation_source")}
        data["loss"].update(verdict=data.get("verdict"), reason=data.get("reason"))
    data.pop("regressions", None)
    return data


def _nest_flat_load(validation: Any) -> Any:
    """A summary's ``validation`` written before the load level was its own part (its keys at the top), nested."""
    if isinstance(validation, dict) and "load" not in validation and "missing_in_files" in validation:
        load = {k: validation[k] for k in _FLAT_LOAD_KEYS if k in validation}
        load["problems"] = [p.removeprefix("load: ") for p in validation.get("problems", []) if p.startswith("load: ")]
        validation = {**{k: v for k, v in validation.items() if k not in _FLAT_LOAD_KEYS}, "load": load}
    return validation


def _summary_1_to_2(data: dict) -> dict:
    """Version 1 to 2: the results nested, the load level its own part (the table above)."""
    data = _nest_flat_results(data)
    if "validation" in data:
        data = {**data, "validation": _nest_flat_load(data["validation"])}
    return data


def _history_1_to_2(table):
    """Version 1 to 2: the columns are the same (only the version mark is new)."""
    return table


#: The upgrade of a summary from each version to the next: {from: step}.
SUMMARY_STEPS: dict[int, Callable[[dict], dict]] = {1: _summary_1_to_2}

#: The upgrade of a history table (a pandas.DataFrame) from each version to the next: {from: step}.
HISTORY_STEPS: dict[int, Callable] = {1: _history_1_to_2}


def _version(found: Any, current: int, what: str) -> int:
    """A file's version: 1 when it has none (None).

    Raises:
        NewerVersionError: a version above ``current``, or one that is no positive integer.
    """
    version = 1 if found is None else found
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise NewerVersionError(f"{VERSION_KEY}: {found!r} in {what} is no version (a positive integer); fix: read a "
                                f"file titanflow wrote")
    if version > current:
        raise NewerVersionError(f"{VERSION_KEY}: {what} is version {version}, newer than this titanflow reads "
                                f"({current}); fix: read it with a titanflow as new as the one that wrote it")
    return version


def upgrade_summary(data: dict) -> dict:
    """A summary.json's content (its JSON as a dict) in the current version (:data:`SUMMARY_VERSION`), with
    ``schema_version`` set; the dict given is not changed.

    Raises:
        NewerVersionError: a version newer than this titanflow's (a ValueError: pydantic names the field).
    """
    version = _version(data.get(VERSION_KEY), SUMMARY_VERSION, "the summary")
    for step in range(version, SUMMARY_VERSION):
        data = SUMMARY_STEPS[step](data)
    return {**data, VERSION_KEY: SUMMARY_VERSION}


def upgrade_history(table, name: str = "the table"):
    """A history table (a pandas.DataFrame as read) in the current version (:data:`HISTORY_VERSION`), its
    ``attrs`` carrying it; ``name`` says which table in an error.

    Raises:
        NewerVersionError: a version newer than this titanflow's.
    """
    version = _version(table.attrs.get(VERSION_KEY), HISTORY_VERSION, name)
    for step in range(version, HISTORY_VERSION):
        table = HISTORY_STEPS[step](table)
    return mark_history(table)


def mark_history(table):
    """``table`` (a pandas.DataFrame) marked as the current version, as it is written (its ``attrs``)."""
    table.attrs[VERSION_KEY] = HISTORY_VERSION
    return table


def world_size(run_dir: Path, parameters: dict) -> int | None:
    """Ranks of a run's launch, from run folders of every version: the job's ``world_size``; for run folders
    written before the job recorded it, ``--nproc_per_node`` of job/launch.json (one node); else ``nproc`` of the
    summary's ``parameters`` (runs written before runs had nodes: the ranks of their one node); None when none
    says."""
    job = run_dir / "job" / JOB_FILE
    if job.is_file() and "world_size" in (recorded := json.loads(job.read_text())):
        return int(recorded["world_size"])
    launch = run_dir / "job" / "launch.json"
    if launch.is_file():
        for arg in json.loads(launch.read_text()).get("argv", []):
            match = re.fullmatch(r"--nproc[_-]per[_-]node=(\d+)", str(arg))
            if match:
                return int(match.group(1))
    return parameters.get("nproc")
