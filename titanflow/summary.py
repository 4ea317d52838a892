"""The run record: per-task timings, the failure if any, and ``summary.json``.

A :class:`RunRecorder` wraps each task call of the flow; when one raises it records
the failed task and its error, and the flow writes the summary in its ``finally``
before the exception propagates (the flow run ends Failed, its logs stay in ``runs/<id>/``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

SUMMARY = "summary.json"


def write_json_atomic(path: Path, data: dict) -> Path:
    """Write ``data`` as indented JSON via a temporary sibling and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


class RunRecorder:
    """Collects what summary.json says about one run.

    ``fields`` holds the summary's keys (scenario, losses, verdict, ...);
    ``timings_s`` maps task name to wall seconds spent in it.
    """

    def __init__(self, run_dir: Path, fields: dict[str, Any]):
        self.run_dir = run_dir
        self.fields: dict[str, Any] = dict(fields)
        self.timings_s: dict[str, float] = {}
        self.failed_task: str | None = None

    @contextlib.contextmanager
    def task(self, name: str) -> Iterator[None]:
        """Time the block as task ``name``; on an exception record it and re-raise (the flow writes
        the summary in its ``finally``)."""
        start = time.monotonic()
        try:
            yield
        except BaseException as err:
            self.failed_task = name
            reason = "interrupted (Ctrl-C)" if isinstance(err, KeyboardInterrupt) else str(err)
            self.fields["error"] = f"{type(err).__name__}: {reason}"
            self.fields["verdict"] = "fail"
            raise
        finally:
            self.timings_s[name] = round(time.monotonic() - start, 3)

    def write(self) -> Path:
        """Write ``run_dir/summary.json`` (atomically) and return its path."""
        summary = {**self.fields, "failed_task": self.failed_task, "timings_s": self.timings_s,
                   "total_s": round(sum(self.timings_s.values()), 3)}
        return write_json_atomic(self.run_dir / SUMMARY, summary)
