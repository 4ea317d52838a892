"""Failure classes: why a scenario run failed, from its summary and the tail of its log.

    from titanflow.failures import classify
    classify(json.load(open("runs/<id>/summary.json")), Path("runs/<id>/train.log").read_text()[-20000:])

Four classes, checked in this order (the first that matches wins):

| class | signals |
|---|---|
| ``infrastructure`` | launch failure, rendezvous / port in use, out of memory, SIGKILL / exit -9 / "Killed", the timeout watchdog, an interrupt |
| ``compile`` | inductor / dynamo / neuronx-cc errors, the ``compile_warmup`` task failing |
| ``numerics`` | a NaN or infinite loss, a first-step loss outside its band (``compare_loss`` verdict fail), loss regression findings |
| ``export_validation`` | the ``export`` or ``validate`` task failing (parity, missing keys, structure) |

Infrastructure comes first because it is the only class worth retrying and its
signals (a killed rank, a taken port) explain whatever else the log shows.
When no signal matches, the failed task decides (:data:`CLASS_OF_TASK`); a task
missing there (a crash in the trainer with an unrecognised message, such as an
import error) counts as a launch failure, i.e. infrastructure.

The regular expressions below were written against real logs; the snippets the
tests use, and the commands that produced them, are in ``tests/fixtures/failure_logs/``.
"""

from __future__ import annotations

import math
import re
from typing import Literal

FailureClass = Literal["infrastructure", "compile", "numerics", "export_validation"]

#: Every failure class, in the order they are checked.
FAILURE_CLASSES: tuple[str, ...] = ("infrastructure", "compile", "numerics", "export_validation")

#: Log/error signatures per class (case-insensitive), checked in FAILURE_CLASSES order.
SIGNATURES: dict[str, list[str]] = {
    "infrastructure": [
        r"timed out after \d+ ?s",                    # titanflow.process watchdog (TrainingError message)
        r"killed after the \d+ s timeout",            # the watchdog's own line in train.log
        r"interrupted \(ctrl-c\)|KeyboardInterrupt",  # titanflow.summary.RunRecorder on Ctrl-C
        r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|exited -9\b|\bKilled\b",  # torchrun / OOM killer
        r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory|MemoryError",
        r"address already in use|EADDRINUSE|DistNetworkError|RendezvousError|rendezvous",
        r"Connection refused|connection reset by peer|NCCL error|Gloo connectFullMesh failed",
        r"No such file or directory: '[^']*torchrun'|command not found",
    ],
    "compile": [
        r"torch\._dynamo|torch\._inductor|InductorError|BackendCompilerFailed|TorchRuntimeError",
        r"neuronx-cc|neuron_cc|NEFF|compilation failed|CompilationError",
    ],
    "numerics": [
        r"Loss is not finite",                        # torchtitan 0.3.0 trainer.py: stops at a NaN/inf loss
        r"non-finite loss|\bNaN loss\b|loss:\s*(?:nan|inf)\b",  # tasks/train.py, tasks/compare.py, step lines
    ],
    "export_validation": [
        r"\bvalidate: |\bexport: |parity|missing keys?|unexpected keys?",
    ],
}

#: Failed task -> class, when no signature matched.
CLASS_OF_TASK: dict[str, str] = {
    "pull_weights": "infrastructure",
    "render_config": "infrastructure",
    "compile_warmup": "compile",
    "train": "infrastructure",
    "export": "export_validation",
    "validate": "export_validation",
    "compare_loss": "numerics",
}

_COMPILED = {cls: [re.compile(p, re.IGNORECASE) for p in patterns] for cls, patterns in SIGNATURES.items()}


def matching_signature(text: str) -> tuple[str, str] | None:
    """(class, the matched text) of the first signature found in ``text``, in class order; None if none."""
    for cls in FAILURE_CLASSES:
        for pattern in _COMPILED[cls]:
            match = pattern.search(text)
            if match:
                return cls, match.group(0)
    return None


def non_finite_steps(losses: list[float] | None) -> list[int]:
    """1-based steps whose loss is NaN or infinite."""
    return [i for i, x in enumerate(losses or [], 1) if x is None or not math.isfinite(float(x))]


def classify(summary: dict, log_tail: str | list[str] = "") -> str | None:
    """The failure class of a run (one of :data:`FAILURE_CLASSES`), or None when it did not fail.

    ``summary``: a summary.json dict; the keys read are ``verdict``, ``failed_task``,
    ``error`` and ``losses`` (all optional). ``log_tail``: the last lines of the
    training log (a string or a list of lines); for a failure before training, "".

    A run failed when its verdict is "fail", a task failed, or a loss is not finite.
    Order: a signature of the infrastructure class in the error or the log tail;
    a compile signature or the compile_warmup task; a non-finite loss; then the
    remaining signatures; then :data:`CLASS_OF_TASK`; a run that failed only its
    verdict (no task failed) is numerics (loss out of band).

    Raises:
        TypeError: ``summary`` is not a dict.
    """
    if not isinstance(summary, dict):
        raise TypeError(f"summary: expected the summary.json dict, got {type(summary).__name__}")
    tail = "\n".join(log_tail) if isinstance(log_tail, list) else (log_tail or "")
    failed_task = summary.get("failed_task")
    bad_steps = non_finite_steps(summary.get("losses"))
    if summary.get("verdict") != "fail" and not failed_task and not bad_steps:
        return None
    text = f"{summary.get('error') or ''}\n{tail}"
    found = matching_signature(text)
    if found and found[0] == "infrastructure":
        return "infrastructure"
    if failed_task == "compile_warmup" or (found and found[0] == "compile"):
        return "compile"
    if bad_steps:
        return "numerics"
    if found:
        return found[0]
    if failed_task:
        return CLASS_OF_TASK.get(failed_task, "infrastructure")
    return "numerics"  # only the verdict failed: compare_loss found the loss out of its band


def classify_exception(task_name: str, error: BaseException) -> str:
    """Class of an exception raised by Prefect task ``task_name`` (its message is the log tail,
    as :class:`tasks.train.TrainingError` carries it)."""
    message = f"{type(error).__name__}: {error}"
    return classify({"verdict": "fail", "failed_task": task_name, "error": message}) or "infrastructure"


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry a failed task run only for an infrastructure failure.

    Prefect passes the task, the task run and its Failed state; the state's result
    is the raised exception. A numerics failure (NaN loss), a compile error or an
    export/validation problem would fail the same way again, so it is not retried.
    """
    error = state.result(raise_on_failure=False)
    if not isinstance(error, BaseException):
        return False
    return classify_exception(task.name, error) == "infrastructure"
