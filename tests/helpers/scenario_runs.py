"""``titanflow run`` of a scenario on cpu, and the golden run: default parameters, checked step by step against the
scenario's golden loss curve (goldens/loss_curves/<scenario>-cpu-<init>.curve.csv, 0.02 nats).

Record the goldens again after an intended change with
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/e2e/test_scenarios.py
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.terminal import TITANFLOW, run_on_terminal
from titanflow.record.summary import RunSummary, read_summary


def _env(api: str | None, **extra: str) -> dict[str, str]:
    """The test's environment; against the server at ``api``, or (None) a temporary one the command starts itself."""
    return {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | ({"PREFECT_API_URL": api} if api else {}) \
        | extra


def run(runs_dir: Path, *options: str, scenario: str = "native", api: str | None = None,
        terminal: bool = False) -> tuple[int, str]:
    """(exit code, output) of ``titanflow run SCENARIO --target cpu`` into ``runs_dir``: its stdout through a pipe
    (the Prefect log, then the summary), or with ``terminal`` the screen of a pseudo-terminal (the progress view,
    then the summary: helpers.terminal)."""
    args = (scenario, "--target", "cpu", "--runs-dir", str(runs_dir), *options)
    if terminal:
        return run_on_terminal(*args, env=_env(api, TERM="xterm-256color"))
    proc = subprocess.run([str(TITANFLOW), "run", *args], capture_output=True, text=True, timeout=900, env=_env(api))
    return proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:]


def summary_of(runs_dir: Path) -> RunSummary:
    """The summary of the one run in ``runs_dir`` (the folder ``again`` of a golden update left aside)."""
    (run_dir,) = [p for p in runs_dir.iterdir() if p.name != "again"]
    return read_summary(run_dir / "summary.json")


def golden_run(runs_dir: Path, scenario: str, *options: str, init: str = "random", api: str | None = None,
               terminal: bool = False, steps: int | None = None) -> tuple[RunSummary, str]:
    """Run with default parameters (:func:`run`); with TITANFLOW_UPDATE_GOLDEN set, first record the run's golden
    curve (and for pretrained init its first-step golden), then run again against them. Asserts the run passed and
    its loss curve was compared (not "no baseline") and held on every step; returns (the summary, the output).

    ``steps``: train only that many leading steps of the golden's workload (``--steps``), which the flow holds to the
    golden's same steps (titanflow.judge.goldens.GoldenCurve.shared_steps: up to 4 at the default warm-up of 2);
    None trains the golden's whole 10. A golden update still records the whole 10-step run first."""
    shorter = ("--steps", str(steps)) if steps else ()
    update = os.environ.get("TITANFLOW_UPDATE_GOLDEN")
    code, output = run(runs_dir, "--init", init, *options, *(() if update else shorter), scenario=scenario, api=api,
                       terminal=terminal)
    summary = summary_of(runs_dir)
    if update:
        record_goldens(summary)
        code, output = run(runs_dir / "again", "--init", init, *options, *shorter, scenario=scenario, api=api,
                           terminal=terminal)
        summary = summary_of(runs_dir / "again")
    assert code == 0, output[-6000:]
    assert ": Completed" in output and summary.verdict == "pass"
    (curve,) = [f for f in summary.findings if f.metric == "losses"]
    assert curve.status == "pass", curve.detail  # every step within 0.02 nats of the golden curve
    trained = steps or 10
    assert len(summary.losses) == trained and f"worst of {trained} steps" in curve.detail, curve.detail
    return summary, output


def record_goldens(summary: RunSummary) -> None:
    """Write ``summary``'s loss curve as its scenario's golden (titanflow.judge.goldens)."""
    from titanflow.judge.goldens import curve_path, write_curve
    from titanflow.judge.workload import CONFIG_KEY_FIELDS, warmup_steps_of
    from titanflow.record import history

    row = history.row_from_summary(Path(summary.export.export_dir).parent / "summary.json")
    scenario, init, mode = summary.scenario, summary.init, summary.parameters.get("model_spec") or "config"
    parameters = {k: v for k, v in summary.parameters.items() if k in CONFIG_KEY_FIELDS}
    if mode != "config":  # part of the workload key (titanflow.judge.workload.config_key)
        parameters["model_spec"] = mode
    weights = "the pretrained tiny checkpoint of its model type (titanflow.run.pretrained)" \
        if init == "pretrained" else "the embedded tiny model"
    how = "default parameters" if mode == "config" else f"the {mode} mode (--model-spec {mode}), else default parameters"
    recorder = os.environ.get("PYTEST_CURRENT_TEST", "tests/e2e/test_scenarios.py").split("::")[0]  # the test file
    write_curve(curve_path(scenario, "cpu", init, model_spec=mode), summary.losses, row.config_key, parameters,
                f"{scenario} on cpu, {init} init from {weights}, {how}; per-step loss (nats) of rank 0,\n"
                f"recorded by {recorder} with torch {row.torch_version}, torchtitan "
                f"{row.torchtitan_version}, transformers {row.transformers_version}",
                environment=summary.environment, weights_digest=summary.weights_digest,
                warmup_steps=warmup_steps_of(summary.parameters))
