"""The ``qwen3-bisect`` flow: the first revision whose scenario run fails the check the bad revision fails.

    check inputs -> probe bad (learns the check) -> probe good (must pass) -> git bisect: probe, mark, ...
    -> artifact bisect-<scenario>-<target>-<init> -> history (_bisects.parquet) -> bisect.json

Each probe is the task ``probe`` (tasks/probe.py), named by its revision, whose ``qwen3-scenario`` flow run is a
subflow run of it, run by the revision's own code in a worktree of its own (titanflow.bisect.probe); the search
is git's own bisect (titanflow.bisect.search). Inputs are checked before any probe (a revision git does not
know, a good revision that is not an ancestor of bad, a bad scenario parameter, no Prefect API the probes can
reach); an endpoint that does not hold (bad passes, good fails) refuses the bisect before git bisect starts.
Whatever happened, the bisect is reported, appended to the history and written to ``<folder>/bisect.json``; the
flow run ends Completed only when git named the first bad commit, else Failed, its message saying why.

The file is not named ``bisect.py``: a deployment loads its flow file with the file's folder first on
``sys.path`` (Prefect's ``load_script_as_module``), where that name would shadow the standard library's
``bisect`` module for everything imported while it loads.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from prefect import flow, runtime
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_API_URL
from prefect.states import Completed, Failed, State

from titan_cfg.job import Init
from titanflow.bisect.env_search import EnvBisectResult
from titanflow.bisect.probe import BisectFolder
from titanflow.bisect.record import append_bisect
from titanflow.bisect.search import BisectResult, bisect_range, check_inputs, new_bisect_id, new_result
from titanflow.flows.scenario import qwen3_scenario
from titanflow.params import ScenarioName, TargetName
from titanflow.paths import REPO_ROOT, runs_root, write_atomic
from titanflow.prefect_ops.stopped import cancelled_not_crashed
from titanflow.report.bisect import bisect_markdown, headline, publish_bisect
from titanflow.tasks.probe import probe

#: The bisect's record in its folder (titanflow.bisect.search.BisectResult as JSON), and its report.
RESULT_FILE, REPORT_FILE = "bisect.json", "bisect.md"

#: Seconds one probe may take, install of a new environment and every retry of its training included.
PROBE_TIMEOUT_S = 7200.0


def new_folder(runs_dir: str | None, bisect_id: str | None, parameters: dict) -> BisectFolder:
    """The bisect's folder ``<runs_dir>/<bisect_id>``, made here (defaults: $TITANFLOW_RUNS or runs/,
    titanflow.bisect.search.new_bisect_id of the probes' ``parameters``), for a bisect over commits or environments.

    Raises:
        ValueError: the folder exists (bisect_id, with the fix).
    """
    folder = BisectFolder(Path(runs_dir or runs_root()) / (bisect_id or new_bisect_id(parameters)))
    try:
        folder.root.mkdir(parents=True)
    except FileExistsError:
        raise ValueError(f"bisect_id: {folder.root} exists; fix: pass another bisect_id, or none") from None
    return folder


def api_url() -> str:
    """The Prefect API the probes report to: this flow run's own.

    Raises:
        ValueError: none is set (an ephemeral in-process server cannot be reached by the probes' processes).
    """
    url = PREFECT_API_URL.value()
    if not url:
        raise ValueError("PREFECT_API_URL: unset; the probes run in processes of their own and report to the "
                         "bisect's server: start one (make server) and export the URL it prints, or use titanflow "
                         "bisect, which starts one")
    return url


def conclude(result: BisectResult | EnvBisectResult, markdown=bisect_markdown, publish=publish_bisect,
             headline_of=headline) -> State:
    """Report the bisect (bisect.json, bisect.md from ``markdown``, the artifact ``publish`` writes, the history);
    returns the flow's final state: Completed when the bisect found what it looks for (git's first bad commit, or
    the package change), else Failed, ``headline_of(result)`` its message either way. A bisect over environments
    passes its own three (flows/env_bisection.py)."""
    logger = get_run_logger()
    result.finished_at = datetime.datetime.now(datetime.UTC)
    folder = Path(result.folder)
    write_atomic(folder / RESULT_FILE, result.model_dump_json(indent=2) + "\n")
    write_atomic(folder / REPORT_FILE, markdown(result))
    publish(result)
    try:
        append_bisect(result)
    except Exception as err:  # noqa: BLE001 - the history is secondary to the bisect's own result: said, not raised
        logger.error("history: the bisect was not recorded: %s: %s", type(err).__name__, err)
    logger.info("%s", headline_of(result))
    message = headline_of(result)
    return Completed(message=message) if result.status == "found" else Failed(message=message)


@flow(name="qwen3-bisect", on_crashed=[cancelled_not_crashed])
def qwen3_bisect(
    good: str,
    bad: str,
    scenario: ScenarioName = "native",
    target: TargetName = "cpu",
    init: Init = "random",
    steps: int | None = None,
    repo: str | None = None,
    runs_dir: str | None = None,
    bisect_id: str | None = None,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
) -> State:
    """Bisect ``good``..``bad`` of the git checkout ``repo`` (default: this one) on the scenario run ``scenario``,
    ``target``, ``init``, ``steps`` (None: ScenarioRun's default) (module docstring). The bisect's folder is
    ``<runs_dir>/<bisect_id>`` (defaults: $TITANFLOW_RUNS or runs/, titanflow.bisect.search.new_bisect_id).
    Returns the final state (:func:`conclude`).

    Raises:
        ValueError: bad input, before any probe (the message names the field and the fix).
    """
    inputs = check_inputs(repo or REPO_ROOT, good, bad, {"scenario": scenario, "target": target, "init": init,
                                                         "steps": steps})
    url = api_url()
    folder = new_folder(runs_dir, bisect_id, inputs.parameters)
    result = new_result(inputs, folder)
    result.flow_run_id = str(runtime.flow_run.id)
    get_run_logger().info("bisect %s..%s of %s (%d commits) in %s", result.good[:12], result.bad[:12], result.repo,
                          result.commits, folder.root)

    def run(revision: str, role: str):
        return probe(result.repo, revision, str(folder.root), inputs.parameters, qwen3_scenario, url, probe_timeout_s)

    try:
        bisect_range(result, run)
    except BaseException as err:  # an error or a cancel: reported as stopped, then raised
        result.status, result.reason = "stopped", f"{type(err).__name__}: {err}"
        raise
    finally:
        state = conclude(result)
    return state
