"""The names of the scenario flow's tasks, defined once.

They are the Prefect task names (``@task(name=...)``), the keys of ``timings_s`` in
summary.json, the ``seconds_<task>`` columns of the history and the ``failed_task`` a
failure is classified by.
"""

from __future__ import annotations

from enum import StrEnum


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
    # the qwen3-bisect's own task
    probe = "probe"  # one revision's qwen3-scenario run, in its own worktree
