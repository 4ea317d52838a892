"""A failed run as a person reads it: its class, the cause in a line or two, the fix and where the logs are.

    from titanflow.record.failure_text import explain
    explain(summary.error, "out_of_memory", Path("runs/<id>"))
    # FailureText(cause="train: torchrun exited 1; root cause (rank 1): Signal 9 (SIGKILL) received by PID 4711:
    #             killed by the kernel's out-of-memory killer at a resident set of 0.82 GiB (the kernel's log)",
    #             fix="a smaller --global-batch-size or --seq-len, ...", logs=[".../train.log", ".../train/ranks"])

A run record's ``error`` (summary.json) keeps everything a failed task raised: the training's is
``<task>: <why>; root cause (rank N): <its exception>; fix: ...; full log <path>`` and then the launch's last lines
(titanflow.launch.torchrun.launch_error), torch elastic's ``ChildFailedError`` block and the ranks' tracebacks
among them. The console shows :func:`explain`'s parts instead (titanflow.cli.print_summary); the whole error stays in
summary.json, train.log, the rank logs and the Prefect log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from titanflow.launch.oom import FIX as OUT_OF_MEMORY_FIX

#: Characters of the cause shown: about two lines of a terminal (the whole error is in summary.json).
MAX_CAUSE_CHARS = 240

#: What to do, per failure class, when the error names no fix of its own (``fix: ...``). ``{run_id}``: the run's id.
FIXES: dict[str, str] = {
    "input": "correct the input the cause names (a field, the weights, a checkpoint); the same input fails the same "
             "way, so it is not retried",
    "checkpoint": "titanflow run --resume {run_id} goes on from the newest intact step checkpoint; the damaged ones "
                  "are kept under checkpoint/set-aside",
    "environment": "titanflow doctor names the upstream change the installed torchtitan lacks for this scenario; "
                   "install one inside the window titan_cfg/window.py lists",
    "disk_full": "free space on the runs folder's disk, or pass --runs-dir on a larger disk",
    "out_of_memory": OUT_OF_MEMORY_FIX.removeprefix("fix: "),
    "infrastructure": "check the machine in the rank logs (a port in use, a rank killed from outside, a timeout), "
                      "then continue the run where it stopped: titanflow run --resume {run_id}",
    "compile": "read the compiler's error in the logs; a change of flags, compiler or kernels since the last run "
               "that compiled is the first suspect (titanflow bisect finds the revision)",
    "numerics": "compare the curve with the golden's (titanflow compare); a lower --lr, or the change that moved the "
                "loss (titanflow bisect)",
    "export_validation": "the check named in the cause failed on the exported folder; summary.json's validation "
                         "report has its figures",
}

#: A ``fix: ...`` clause of an error's first line, up to the root cause or the log that follows it, or the line's end.
_FIX = re.compile(r";\s*fix:\s*(?P<fix>.*?)(?=;\s*(?:full log |root cause \(rank \d+\))|$)")
#: The first line's end that points at the log: ``; full log <path>``.
_FULL_LOG = re.compile(r";\s*full log .*$")
#: An exception line as Python prints it (leading blanks and torchrun's ``[rankN]:`` prefix allowed).
_EXCEPTION = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b:.*)$")
#: Exceptions that say only that something below failed: torch elastic's banner, Prefect's and titanflow's wrappers.
_WRAPPERS = re.compile(r"ChildFailedError|^TrainingError|^CheckpointException")


@dataclass(frozen=True)
class FailureText:
    """One failed run, said briefly (module docstring).

    ``cause``: the failed task and its root cause, at most :data:`MAX_CAUSE_CHARS` characters, one line;
    ``fix``: what to do (the error's own ``fix:`` clauses, else the class's :data:`FIXES`), "" when no class is known;
    ``logs``: the run's log files and folders that exist (train.log, the rank logs, summary.json), as paths.
    """

    cause: str
    fix: str
    logs: list[str] = field(default_factory=list)


def explain(error: str | None, failure_class: str | None, run_dir: Path | None = None) -> FailureText:
    """:class:`FailureText` of a failed run whose record says ``error`` and whose class is ``failure_class``
    (titanflow.record.history.run_failure_class); ``run_dir``: its folder, for the log paths (none without it)."""
    text = (error or "").strip()
    head = text.split("\n", 1)[0].removeprefix("TrainingError: ").strip()
    fixes = [m.group("fix").strip() for m in _FIX.finditer(head)]
    cause = _FULL_LOG.sub("", _FIX.sub("", head)).strip()
    if "root cause (rank" not in cause:  # no rank named one: the launch's last exception line says what failed
        exception = _last_exception(text)
        if exception and exception not in cause:
            cause = f"{cause}; {exception}" if cause else exception
    if len(cause) > MAX_CAUSE_CHARS:
        cause = cause[:MAX_CAUSE_CHARS - 1] + "…"
    run_id = run_dir.name if run_dir is not None else "<run-id>"
    fix = "; ".join(fixes) or FIXES.get(failure_class or "", "").format(run_id=run_id)
    return FailureText(cause=cause, fix=fix, logs=_logs(run_dir))


def _last_exception(text: str) -> str | None:
    """The last exception line of ``text`` that is not a wrapper (:data:`_WRAPPERS`)."""
    found = [m.group(1).strip() for line in text.splitlines() if (m := _EXCEPTION.match(line))]
    found = [line for line in found if not _WRAPPERS.search(line)]
    return found[-1] if found else None


def _logs(run_dir: Path | None) -> list[str]:
    """The logs of ``run_dir`` that exist: train.log (the launcher and rank 0, every launch), train/ranks (each
    rank's own stdout, stderr and error file), summary.json (the whole error)."""
    if run_dir is None:
        return []
    return [str(path) for path in (run_dir / "train.log", run_dir / "train" / "ranks", run_dir / "summary.json")
            if path.exists()]
