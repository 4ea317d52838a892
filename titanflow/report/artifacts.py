"""Prefect artifacts of a scenario run, keyed per scenario, target and init so the UI keeps
their history (Artifacts page: one key, one version per run).

- :func:`artifact_key`: ``<scenario>-<target>-<init>``, the prefix of every key;
- :class:`TrainingProgress`: ``<key>-progress``, a progress artifact advanced once per logged step;
- :func:`publish_metrics`: ``<key>-metrics``, the per-step metrics table;
- :func:`publish_findings`: ``<key>-baselines``, a table of metrics against their baselines;
- :func:`table_rows`: the rows of both, every cell strict JSON (non-finite numbers as the strings
  ``"nan"``, ``"inf"``, ``"-inf"``);
- :func:`png_markdown`: a PNG embedded in markdown as a ``data:image/png`` URI. Both Prefect UIs
  render it (v2 whitelists ``data:image/`` in ``img src``; v1 passes ``src`` through), while a
  file path or ``file://`` link is not reachable from the browser.
"""

from __future__ import annotations

import base64
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd
from prefect import get_client
from prefect.artifacts import create_progress_artifact, create_table_artifact
from prefect.client.schemas.actions import ArtifactUpdate
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

from titanflow.launch.metrics import parse_step_line
from titanflow.results import Finding


def artifact_key(fields: Mapping[str, Any]) -> str:
    """``<scenario>-<target>-<init>`` in the lowercase-and-dashes form Prefect keys require.

    ``fields``: anything with those three keys (a summary dict, ``Job.model_dump()``).
    """
    raw = f"{fields['scenario']}-{fields['target']}-{fields['init']}"
    return "".join(c if c.isalnum() else "-" for c in raw.lower())


class TrainingProgress:
    """Progress artifact of one training launch: percent of ``total_steps`` done.

    Use as a context manager around the launch, inside the train task (so the artifact
    belongs to its task run)::

        with TrainingProgress(key, job.steps, job.run_id) as progress:
            run_training(..., on_lines=progress.on_lines)

    Entering creates the artifact at 0 % (a launch resumed from step k: at ``100 * k / total_steps``, saying
    so) and opens one API client for the updates;
    :meth:`on_lines` takes the output lines of the launch and, on a torchtitan step line
    (``titanflow.launch.metrics.parse_step_line``) for a step not seen before, sets the artifact to
    ``100 * step / total_steps`` with the step's loss in the description. A step logged
    twice updates once: at most one API call per step.

    Why not ``prefect.artifacts.update_progress_artifact``: its sync form builds a new client
    per call (82 ms per update measured here, 12 ms with one open client), and ``on_lines``
    runs on the launch's forwarding thread (``titanflow.launch.forward``), which should keep up with the output. For the same reason an update that fails is logged once, never raised.
    """

    def __init__(self, key: str, total_steps: int, run_id: str, resumed_from_step: int | None = None):
        if total_steps < 1:
            raise ValueError(f"total_steps is {total_steps}: it must be >= 1 (the job's training steps)")
        self.key = f"{key}-progress"
        self.total_steps = total_steps
        self.run_id = run_id
        self.resumed_from_step = resumed_from_step
        self.artifact_id = None
        self.last_step = resumed_from_step or 0
        self.updates = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._client = None
        try:
            self._logger = get_run_logger()
        except MissingContextError:
            self._logger = logging.getLogger(__name__)

    def __enter__(self) -> Self:
        started = (f"training resumed from step {self.resumed_from_step}" if self.resumed_from_step
                   else "training started")
        self.artifact_id = create_progress_artifact(
            min(100.0, 100.0 * self.last_step / self.total_steps), key=self.key,
            description=f"run {self.run_id}: {started}, {self.total_steps} steps")
        self._client = get_client(sync_client=True).__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.__exit__(*exc_info)

    def on_line(self, line: str) -> None:
        """Advance the artifact if ``line`` is the first step line of a new step; otherwise do nothing."""
        self.on_lines([line])

    def on_lines(self, lines: list[str]) -> None:
        """Advance the artifact to the newest new step among the step lines of ``lines`` (one update per batch,
        however many steps it holds); otherwise do nothing."""
        rows = [row for row in map(parse_step_line, lines) if row is not None]
        if not rows:
            return
        row = max(rows, key=lambda r: r["step"])
        with self._lock:  # the forwarder's thread and the caller may share the step count and the client
            if row["step"] <= self.last_step:
                return
            self.last_step = row["step"]
            update = ArtifactUpdate(
                data=min(100.0, 100.0 * row["step"] / self.total_steps),
                description=f"run {self.run_id}: step {row['step']}/{self.total_steps}, loss {row['loss']:.4f}")
            try:
                if self._client is None:
                    raise RuntimeError("the progress artifact is not open (use TrainingProgress as a context manager)")
                self._client.update_artifact(self.artifact_id, update)
                self.updates += 1
            except Exception as err:  # noqa: BLE001 - a monitoring failure must not stop training
                self.failures += 1
                if self.failures == 1:
                    self._logger.warning("progress artifact %s not updated at step %d: %s", self.key, row["step"], err)


def waiting_progress(key: str, run_id: str):
    """An ``on_wait`` for titanflow.prefect_ops.slot.training_slot: each "waiting for the training slot"
    message becomes the description of the ``<key>-progress`` artifact, at 0 %. A failure to publish
    it is logged, never raised (waiting goes on)."""

    def on_wait(message: str) -> None:
        try:
            create_progress_artifact(0.0, key=f"{key}-progress", description=f"run {run_id}: {message}")
        except Exception as err:  # noqa: BLE001 - monitoring must not stop the run
            logging.getLogger(__name__).warning("progress artifact %s-progress not updated: %s", key, err)

    return on_wait


#: What :func:`table_cell` writes for NaN, +inf and -inf.
NON_FINITE_CELLS = ("nan", "inf", "-inf")


def table_cell(value: Any) -> Any:
    """``value`` as a strict-JSON table cell: a NaN, inf or -inf number becomes the string ``"nan"``,
    ``"inf"`` or ``"-inf"``; a numpy scalar becomes its Python value; anything else is kept.

    Why: ``prefect.artifacts.create_table_artifact`` serialises with ``json.dumps``, which turns NaN
    into null (Prefect's own sanitising) but writes inf as the bare token ``Infinity``, which is not
    JSON: the UI cannot parse the table and shows none of its rows. A string keeps inf and NaN apart.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def table_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with every cell through :func:`table_cell`: each row kept, in order, strict JSON."""
    return [{column: table_cell(value) for column, value in row.items()} for row in rows]


def findings_rows(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Table rows of the findings (column ``class``; titanflow.results.Finding.as_record)."""
    return table_rows(f.as_record() for f in findings)


def publish_findings(findings: Iterable[Finding], key: str, run_id: str):
    """Publish the findings as the table artifact ``<key>-baselines``; returns its id."""
    rows = findings_rows(findings)
    failed = sum(row["passed"] is False for row in rows)
    return create_table_artifact(key=f"{key}-baselines", table=rows,
                                 description=f"run {run_id}: {len(rows)} metrics against their baselines, "
                                             f"{failed} out of margin")


def publish_metrics(table: pd.DataFrame, key: str, run_id: str):
    """Publish the per-step metrics (titanflow.launch.metrics.COLUMNS, one row per step) as the table
    artifact ``<key>-metrics``, every row kept (:func:`table_rows`); returns its id. The description
    names the first step whose loss is not finite, if any."""
    rows = table_rows(table.to_dict(orient="records"))
    bad = [row["step"] for row in rows if row.get("loss") in NON_FINITE_CELLS]
    note = f"; loss not finite from step {bad[0]} ({len(bad)} of {len(rows)} steps)" if bad else ""
    return create_table_artifact(key=f"{key}-metrics", table=rows,
                                 description=f"per-step metrics of run {run_id}{note}")


def png_markdown(path: Path, alt: str) -> str:
    """Markdown image of the PNG at ``path``, inlined as a base64 ``data:image/png`` URI (see the module docstring).

    Raises:
        ValueError: the file is not a PNG (its first 8 bytes are not the PNG signature).
    """
    data = Path(path).read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError(f"{path} is not a PNG file")
    return f"![{alt}](data:image/png;base64,{base64.b64encode(data).decode('ascii')})"
