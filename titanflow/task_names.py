"""The names of the scenario flow's tasks, defined once.

They are the Prefect task names (``@task(name=...)``), the keys of ``timings_s`` in
summary.json, the ``seconds_<task>`` columns of the history and the ``failed_task`` a
failure is classified by. :data:`PHASE_LOGGER` tells when each starts and ends.
"""

from __future__ import annotations

import logging
from enum import StrEnum

#: The logger on which the flow's RunRecorder.task (titanflow.run.recorder) tells each task's start and end, one
#: INFO record each, carrying ``phase`` (the task's name), ``phase_state`` (started, then completed | cached |
#: failed | cancelled) and, at the end, ``phase_s`` (the task's seconds, as in ``timings_s``). Not a Prefect
#: logger: the records reach neither the Prefect API nor its console; at the default level (the root logger's
#: WARNING) they are not even made, unless a reader such as titanflow.run.console sets it to INFO.
PHASE_LOGGER = logging.getLogger("titanflow.run.phases")


class TaskName(StrEnum):
    """One member per task of ``qwen3-scenario``, in the order the flow runs them (a task another task calls
    follows its caller)."""

    pull_weights = "pull_weights"
    build_tiny_weights = "build_tiny_weights"  # inside pull_weights, for the embedded weights
    build_pretrained_weights = "build_pretrained_weights"  # inside pull_weights, for their pretrained checkpoint
    trim_weights = "trim_weights"
    render_config = "render_config"
    torchtitan_config = "torchtitan_config"  # inside render_config
    compile_warmup = "compile_warmup"
    train = "train"
    export = "export"
    validate = "validate"
    compare_loss = "compare_loss"
    compare_history = "compare_history"
    append_history = "append_history"
    report = "report"
    # the qwen3-nightly's own tasks, after its scenario runs
    compare_runs = "compare_runs"  # each failed run against the last passing comparable run
    trends = "trends"  # the trends-<target> artifact
    prune = "prune"  # the runs folder's retention policy applied (titanflow.record.retention)
    # the qwen3-bisect's own task
    probe = "probe"  # one revision's qwen3-scenario run, in its own worktree
    # the qwen3-canary's own tasks
    canary_stack = "canary_stack"  # the installed stack of one side's venv
    canary_run = "canary_run"  # one scenario run on one side, in its profile's venv
