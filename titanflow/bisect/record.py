"""A bisect in the history folder: one row per bisect in ``<history>/_bisects.parquet``, beside ``runs.parquet``.

    append_bisect(result)                      # titanflow.bisect.search.BisectResult, after each bisect
    read_bisects()                             # a DataFrame, oldest first

Why a table of its own: a history row is one scenario run (titanflow.history_row.HistoryRow, the rows
the regression rules and trends read), and a bisect is many runs of many revisions with a result of its
own. Its probes' runs are in the bisect's own folder and history (titanflow.bisect.probe), never among
the nightly's baselines; this table keeps each bisect's result and its probes. The leading underscore
keeps ``pandas.read_parquet("history")`` reading the runs only: pyarrow skips files whose names start with
``_`` or ``.`` when it reads a folder. Appends go through titanflow.record.history.append_rows (the same
lock and atomic replace), keyed by ``bisect_id``.

Columns: ``bisect_id``, ``flow_run_id``, ``repo``, ``scenario``, ``target``, ``init``, ``steps`` (None:
ScenarioRun's default), ``good``, ``bad`` (full hashes), ``commits`` (good..bad), ``status`` (found |
ambiguous | refused | stopped), ``reason``, ``failure_class`` and ``check`` (what the bad revision fails),
``first_bad``, ``first_bad_subject``, ``first_bad_message``, ``candidates`` (ambiguous: the commits left),
``probes`` and ``bisect_probes`` (all probes, those git asked for), ``probe_table`` (JSON: each probe's
revision, role, verdict, class, checks, losses, run and flow run ids), ``started_at``, ``finished_at``
(UTC), ``wall_s`` (s), ``folder``, ``kind`` (``commits``).

A bisect over environments (titanflow.bisect.env_search) has ``kind`` ``environments``; ``good`` and ``bad`` are the
environments' labels (a constraints file, ``run <run_id>``), ``commits`` the number of package changes, ``first_bad``
the change found (``name a -> b``) with ``package``, ``package_before`` and ``package_after`` (None: added or
removed), ``candidates`` the changes left, and ``first_bad_subject``/``first_bad_message`` None.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from titanflow.bisect.env_search import EnvBisectResult
from titanflow.bisect.search import BisectResult
from titanflow.record.history import append_rows, read_table

#: The bisects' table in the history folder.
BISECT_TABLE = "_bisects.parquet"


def bisect_row(result: BisectResult) -> dict:
    """The table row of ``result`` (module docstring)."""
    subject = next((p.subject for p in result.probes if p.revision == result.first_bad), None)
    probes = [p.model_dump(include={"role", "revision", "subject", "verdict", "failure_class", "checks", "losses",
                                    "run_id", "flow_run_id", "wall_s"}) for p in result.probes]
    return {
        "bisect_id": result.bisect_id, "flow_run_id": result.flow_run_id, "repo": result.repo,
        "scenario": result.parameters["scenario"], "target": result.parameters["target"],
        "init": result.parameters["init"], "steps": result.parameters.get("steps"),
        "good": result.good, "bad": result.bad, "commits": result.commits, "status": result.status,
        "reason": result.reason, "failure_class": result.check.failure_class if result.check else None,
        "check": result.check.check if result.check else None, "first_bad": result.first_bad,
        "first_bad_subject": subject, "first_bad_message": result.first_bad_message,
        "candidates": list(result.candidates), "probes": len(result.probes), "bisect_probes": result.steps_taken,
        "probe_table": json.dumps(probes), "started_at": pd.Timestamp(result.started_at),
        "finished_at": pd.Timestamp(result.finished_at) if result.finished_at else None,
        "wall_s": result.wall_s, "folder": result.folder, "kind": "commits",
    }


def env_bisect_row(result: EnvBisectResult) -> dict:
    """The table row of a bisect over environments (module docstring)."""
    probes = [p.model_dump(include={"role", "revision", "subject", "verdict", "failure_class", "checks", "losses",
                                    "run_id", "flow_run_id", "environment", "wall_s"}) for p in result.probes]
    found = result.first_bad
    return {
        "bisect_id": result.bisect_id, "flow_run_id": result.flow_run_id, "repo": result.repo,
        "scenario": result.parameters["scenario"], "target": result.parameters["target"],
        "init": result.parameters["init"], "steps": result.parameters.get("steps"),
        "good": result.good.label, "bad": result.bad.label, "commits": len(result.changes), "status": result.status,
        "reason": result.reason, "failure_class": result.check.failure_class if result.check else None,
        "check": result.check.check if result.check else None, "first_bad": str(found) if found else None,
        "first_bad_subject": None, "first_bad_message": None, "candidates": [str(c) for c in result.candidates],
        "probes": len(result.probes), "bisect_probes": result.steps_taken, "probe_table": json.dumps(probes),
        "started_at": pd.Timestamp(result.started_at),
        "finished_at": pd.Timestamp(result.finished_at) if result.finished_at else None,
        "wall_s": result.wall_s, "folder": result.folder, "kind": "environments",
        "package": found.name if found else None, "package_before": found.before if found else None,
        "package_after": found.after if found else None,
    }


def append_bisect(result: BisectResult | EnvBisectResult, history_dir: Path | str | None = None) -> Path:
    """Append ``result``'s row (a bisect_id already there is replaced; a bisect over environments as
    :func:`env_bisect_row`); returns the table's path.

    Raises:
        filelock.Timeout, titanflow.record.history.HistoryError: as titanflow.record.history.append_rows.
    """
    row = env_bisect_row(result) if isinstance(result, EnvBisectResult) else bisect_row(result)
    return append_rows([row], history_dir, name=BISECT_TABLE, key="bisect_id")


def read_bisects(history_dir: Path | str | None = None) -> pd.DataFrame:
    """Every bisect recorded, oldest first; empty when none was.

    Raises:
        titanflow.record.history.HistoryError: the table cannot be read.
    """
    table = read_table(BISECT_TABLE, history_dir)
    return table.sort_values("started_at", kind="stable").reset_index(drop=True) if not table.empty else table
