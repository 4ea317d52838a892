"""The ``qwen3-bisect-env`` flow: the package change between a good and a bad environment that moves a scenario
run's verdict.

    check inputs -> order the changes (the bad overlay built) -> bad endpoint (learns the check) -> good endpoint
    (must pass) -> binary search over k: probe the good environment with the first k changes, ...
    -> artifact bisect-env-<scenario>-<target>-<init> -> history (_bisects.parquet) -> bisect.json

Each probe is the commit bisect's task ``probe`` (tasks/probe.py) at one revision (the code every probe runs),
with an overlay of the environment's packages (titanflow.bisect.overlay) first on its ``PYTHONPATH``; a side given
as a run keeps that run's verdict and is not probed (titanflow.bisect.env_search). Whatever happened, the bisect is
reported, appended to the history and written to ``<folder>/bisect.json``; the flow run ends Completed only when
one package change is named, else Failed, its message saying why.
"""

from __future__ import annotations

from prefect import flow, runtime
from prefect.logging import get_run_logger
from prefect.states import State

from titan_cfg.job import Init
from titanflow.bisect.env_search import bisect_environments, check_env_inputs, environment_pins, \
    new_env_result, order_result_changes, pip_options
from titanflow.flows.bisection import PROBE_TIMEOUT_S, api_url, conclude, new_folder
from titanflow.flows.scenario import qwen3_scenario
from titanflow.params import ScenarioName, TargetName
from titanflow.paths import REPO_ROOT
from titanflow.prefect_ops.stopped import cancelled_not_crashed
from titanflow.report.env_bisect import env_bisect_markdown, env_headline, publish_env_bisect
from titanflow.tasks.probe import probe


@flow(name="qwen3-bisect-env", on_crashed=[cancelled_not_crashed])
def qwen3_bisect_environments(
    good_env: str | None = None,
    bad_env: str | None = None,
    good_run: str | None = None,
    bad_run: str | None = None,
    revision: str = "HEAD",
    scenario: ScenarioName = "native",
    target: TargetName = "cpu",
    init: Init = "random",
    steps: int | None = None,
    repo: str | None = None,
    runs_dir: str | None = None,
    bisect_id: str | None = None,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
) -> State:
    """Bisect the package changes from the good environment (``good_env``, a constraints file, or ``good_run``, a
    run id or folder) to the bad one (``bad_env`` or ``bad_run``) on the scenario run ``scenario``, ``target``,
    ``init``, ``steps``, every probe running ``revision`` of the git checkout ``repo`` (default: this one) (module
    docstring). The bisect's folder is ``<runs_dir>/<bisect_id>``; run ids are looked up under $TITANFLOW_RUNS or
    runs/. Returns the final state (titanflow.flows.bisection.conclude).

    Raises:
        ValueError: bad input, before any probe (the message names the field and the fix).
    """
    parameters = {"scenario": scenario, "target": target, "init": init, "steps": steps}
    inputs = check_env_inputs(repo or REPO_ROOT, revision, parameters, good_env=good_env, bad_env=bad_env,
                              good_run=good_run, bad_run=bad_run)
    url = api_url()
    folder = new_folder(runs_dir, bisect_id, inputs.parameters)
    result = new_env_result(inputs, folder)
    result.flow_run_id = str(runtime.flow_run.id)
    logger = get_run_logger()

    def run(k: int, role: str):
        return probe(result.repo, result.revision, str(folder.root), inputs.parameters, qwen3_scenario, url,
                     probe_timeout_s, label=f"env-{k}", pins=environment_pins(result, k),
                     pip_options=pip_options(result))

    try:
        order_result_changes(result)
        logger.info("bisect over %d package changes (%s .. %s) at %s in %s: %s", len(result.changes),
                    result.good.label, result.bad.label, result.revision[:12], folder.root,
                    "; ".join(map(str, result.changes)))
        bisect_environments(result, run)
    except BaseException as err:  # an error or a cancel: reported as stopped, then raised
        result.status, result.reason = "stopped", f"{type(err).__name__}: {err}"
        raise
    finally:
        state = conclude(result, env_bisect_markdown, publish_env_bisect, env_headline)
    return state
