"""Failure classes: why a scenario run failed, from its summary and the tail of its log.

    from titanflow.record.summary import classify, read_summary
    classify(read_summary("runs/<id>/summary.json"), Path("runs/<id>/train.log").read_text()[-20000:])

A launch that failed is classified by its root cause first: the first failing rank's own error,
which the training error names (``root cause (rank N): ...``, titanflow.launch.root_cause). Its
exception line is matched against the signatures of every class below, ``input`` first; only when it
matches none (or there is no root cause: a killed launch, a timeout) do the other signals decide,
checked in this order (the first that matches wins):

| class | signals |
|---|---|
| ``input`` | the root cause is a checkpoint or input that does not load: a missing or unexpected key, a shape mismatch, a damaged safetensors file, a missing file; or a rank's own ``ValueError``, ``AssertionError`` or ``IndexError`` that no signature of any class explains (:data:`RANK_REFUSAL`: a configuration or data the trainer refuses) (never retried) |
| ``checkpoint`` | a step checkpoint a resume cannot use: the ranks could not load the one titanflow's check of its files passed (``checkpoint: checkpoint/step-N did not load in the ranks``, titanflow.launch.torchrun, which set it aside), or every complete one was set aside as damaged (``checkpoint: no intact step checkpoint is left``, titanflow.launch.resume); matched on the whole error before anything else (never retried: the same checkpoint fails the same way, and the next resume goes on from the one before it) |
| ``environment`` | the installed torchtitan cannot serve the scenario: an API it needs is missing, or one it builds on was removed upstream (titan_cfg.window.WindowError, named with the upstream date; found before launch by the render and doctor) (never retried: the same install refuses again) |
| ``disk_full`` | a write that found its file system full: ``No space left on device`` / errno 28 / ENOSPC, a disk quota (EDQUOT), titanflow's own ``disk full: <what> could not be written to <path>: ...`` (titanflow.paths.DiskFull) (never retried: the same run fills the same disk) |
| ``out_of_memory`` | a rank the kernel's out-of-memory killer ended (titanflow.launch.oom adds ``killed by the kernel's out-of-memory killer`` to a SIGKILL's root cause), ``out of memory``, ``OutOfMemoryError``, ``Cannot allocate memory``, ``MemoryError`` (never retried: the same job meets the same limit) |
| ``infrastructure`` | launch failure, rendezvous / port in use, SIGKILL / exit -9 / "Killed" of no known cause, the timeout watchdog |
| ``compile`` | inductor / dynamo / neuronx-cc errors, the ``compile_warmup`` task failing |
| ``numerics`` | a NaN or infinite loss, a first-step loss outside its band (``compare_loss`` verdict fail), loss regression findings |
| ``export_validation`` | the ``export`` or ``validate`` task failing (parity, missing keys, structure) |
| ``performance`` | nothing in the log: the run trained and its loss held, but a performance rule failed it (out of margin on consecutive runs, titanflow.judge.regression; ``performance_failed``) |

A cancelled run (verdict ``cancelled``: a Prefect cancel, Ctrl-C; titanflow.prefect_ops.stopped.cancel_cause)
did not fail and has no class, whatever its log shows. A task's exception is classified, a cancel apart, by
titanflow.prefect_ops.stopped.classify_exception (Prefect's exceptions are known there, not here).

The machine's classes come first (a full disk, an exhausted memory, then infrastructure): their signals (a save
that found no space, a rank the out-of-memory killer took, a taken port) explain whatever else the log shows, and
infrastructure is the only class worth retrying.
When no signal matches, the failed task decides (:data:`CLASS_OF_TASK`); a task
missing there (a crash in the trainer with an unrecognised message, such as an
import error) counts as a launch failure, i.e. infrastructure.

The regular expressions below were written against real logs; the snippets the
tests use, and the commands that produced them, are in ``tests/fixtures/failure_logs/``.
"""

from __future__ import annotations

import re
from typing import get_args

from titanflow.paths import DISK_FULL_TEXT
from titanflow.results import FailureClass, non_finite_steps
from titanflow.task_names import TaskName

#: Every failure class, in the order they are checked.
FAILURE_CLASSES: tuple[str, ...] = get_args(FailureClass)

#: Log/error signatures per class (case-insensitive), checked in FAILURE_CLASSES order.
SIGNATURES: dict[str, list[str]] = {
    "input": [  # matched on a root-cause line only: elsewhere "No such file" may be the launcher's
        r"Missing key in checkpoint state_dict|Unexpected key\(s\) in state_dict|size mismatch for",
        r"SafetensorError|HeaderTooLarge|safetensors_rust",
        r"^FileNotFoundError|^IsADirectoryError|^ConfigError",
    ],
    "checkpoint": [  # titanflow's own words (titanflow.launch.torchrun, titanflow.launch.resume): on the whole error
        r"\bcheckpoint: (?:checkpoint/step-\d+ did not load in the ranks|no intact step checkpoint is left)",
    ],
    "environment": [  # the installed torchtitan cannot serve the scenario (titan_cfg.window.WindowError)
        r"WindowError|cannot serve the \w+ scenario",
    ],
    "disk_full": [DISK_FULL_TEXT],  # titanflow.paths: the OS's words, the errno names, titanflow's own DiskFull
    "out_of_memory": [
        r"killed by the kernel's out-of-memory killer",  # titanflow.launch.oom, on a SIGKILL's root cause
        r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory|MemoryError",
    ],
    "infrastructure": [
        r"timed out after \d+ ?s",                    # titanflow.launch.process watchdog (TrainingError message)
        r"killed after the \d+ s timeout",            # the watchdog's own line in train.log
        r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|exited -9\b|\bKilled\b",  # torchrun; a kill of no known cause
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
        r"non-finite loss|\bNaN loss\b|loss:\s*(?:nan|inf)\b",  # launch/torchrun.py, judge/loss.py, step lines
    ],
    "export_validation": [
        r"\bvalidate: |\bexport: |parity|missing keys?|unexpected keys?",
    ],
    "performance": [],  # judged from the run's findings, never from its log
}

#: Failed task -> class, when no signature matched.
CLASS_OF_TASK: dict[TaskName, FailureClass] = {
    TaskName.pull_weights: "infrastructure",
    TaskName.trim_weights: "input",  # the weights cannot be trimmed as asked
    TaskName.render_config: "infrastructure",
    TaskName.compile_warmup: "compile",
    TaskName.train: "infrastructure",
    TaskName.export: "export_validation",
    TaskName.validate: "export_validation",
    TaskName.compare_loss: "numerics",
}

_COMPILED = {cls: [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in patterns]
             for cls, patterns in SIGNATURES.items()}

#: The root cause the training error names (titanflow.launch.torchrun.launch_error).
ROOT_CAUSE = re.compile(r"root cause \(rank \d+\): (?P<message>[^\n]*?)(?:; full log |$)", re.MULTILINE)


def root_cause(error: str | None) -> str | None:
    """The first failing rank's exception line named in ``error``, or None."""
    match = ROOT_CAUSE.search(error or "")
    return match.group("message") if match else None


#: A refusal of the run's own input, raised by titanflow's checks after the flow started (a Hub snapshot or
#: the built pretrained checkpoint is checked once resolved, in render_config; the node's baseline of the run's
#: workload is read by the judge, titanflow.judge.baselines): the message names the field first. A TransientDownloadError (a server error, a reset connection) is not one: it is infrastructure.
INPUT_REFUSAL = re.compile(r"^(?:ValueError|WeightsError|FileNotFoundError|ConfigError|BaselineError): "
                           r"(?:weights|seq_len|steps|nnodes|nproc_per_node|nproc|global_batch_size|kernels|timeout_s|init|lr|resume"
                           r"|baseline|history_dir): ")

#: A rank's own refusal of the run's configuration or data, on a root cause no signature of any class matched:
#: torchtitan checks its config with ``ValueError`` and ``assert`` (a parallel degree that does not divide the batch
#: or the sequence), and a token id past the embedding's rows fails as ``IndexError: index out of range in self``. Each
#: fails the same way on every launch, so it is input, never retried. A ``ValueError`` of a failed rendezvous matches
#: the infrastructure signatures first; other exception types (``TypeError``, ``AttributeError``: the code's own
#: errors, or a broken install) keep the failed task's class.
RANK_REFUSAL = re.compile(r"^(?:ValueError|AssertionError|IndexError)\b")

#: The machine's classes: matched on a whole error and log tail before the run's own (compile, numerics, export).
MACHINE_CLASSES: tuple[str, ...] = ("disk_full", "out_of_memory", "infrastructure")

#: The classes matched on a whole error and log tail: ``input``'s signatures hold for a root cause only.
TEXT_CLASSES: tuple[str, ...] = tuple(c for c in FAILURE_CLASSES if c != "input")


def matching_signature(text: str, classes: tuple[str, ...] = TEXT_CLASSES) -> tuple[str, str] | None:
    """(class, the matched text) of the first signature found in ``text``, in the order of ``classes``;
    None if none."""
    for cls in classes:
        for pattern in _COMPILED[cls]:
            match = pattern.search(text)
            if match:
                return cls, match.group(0)
    return None


def classify_failure(*, verdict: str | None, failed_task: str | None, error: str | None,
                     losses: list[float] | None, log_tail: str = "", performance_failed: bool = False
                     ) -> FailureClass | None:
    """The failure class of a run (one of :data:`FAILURE_CLASSES`), or None when it did not fail.

    A run failed when its ``verdict`` is "fail", a task failed, or a loss is not finite; a
    ``cancelled`` run did not fail (None), whatever it logged before it was stopped.
    Order: ``checkpoint`` when ``error`` says titanflow found the step checkpoint unusable; the root cause ``error``
    names, when a signature of any class matches it, else input when it is a
    rank's own refusal (:data:`RANK_REFUSAL`); input when ``error`` is titanflow's own refusal of the run's input
    (:data:`INPUT_REFUSAL`); then a
    signature of a machine class (:data:`MACHINE_CLASSES`, in that order) in ``error`` or ``log_tail`` (the last lines
    of the training log; "" for a failure before training); a compile signature or the
    compile_warmup task; a non-finite loss; then the remaining signatures; then
    :data:`CLASS_OF_TASK`; a run that failed only its verdict (no task failed) is numerics
    (loss out of band), or performance when ``performance_failed``: its first-step loss and loss curve held and a
    performance finding failed it (titanflow.record.summary.classify says so from the summary).
    """
    if verdict == "cancelled":
        return None
    bad_steps = non_finite_steps(losses)
    if verdict != "fail" and not failed_task and not bad_steps:
        return None
    if matching_signature(error or "", ("checkpoint",)):  # titanflow's own finding, said only when it is one
        return "checkpoint"
    cause = root_cause(error)
    by_cause = matching_signature(cause, FAILURE_CLASSES) if cause else None
    if by_cause:
        return by_cause[0]
    if cause and RANK_REFUSAL.match(cause):
        return "input"
    if INPUT_REFUSAL.match(error or ""):
        return "input"
    found = matching_signature(f"{error or ''}\n{log_tail or ''}")
    if found and found[0] in MACHINE_CLASSES:
        return found[0]
    if failed_task == TaskName.compile_warmup or (found and found[0] == "compile"):
        return "compile"
    if bad_steps:
        return "numerics"
    if found:
        return found[0]
    if failed_task:
        return CLASS_OF_TASK.get(failed_task, "infrastructure")
    if performance_failed:
        return "performance"  # only the verdict failed, on a performance rule
    return "numerics"  # only the verdict failed: compare_loss found the loss out of its band, or its curve left it
