"""Checks that run before anything is trained or written, shared by the CLI and the flow.

Nothing here trains, builds or imports torch in this process: parameters, the target's runtime (titanflow doctor's
checks on a Neuron node), the scheduler's own check (Slurm's ``sbatch --test-only``, pod 0 of a Kubernetes job), the
runs folder, whether the weights fit the run (titanflow.weights.fit: a local folder's config.json, a Hub id's copy
on this machine, none while offline refused; titanflow.run.model_config: the embedded tiny model's fields, known
before the flow builds it, and the trim),
and whether what the run writes fits the space free under its runs folder (titanflow.run.disk).
Each failure is a :class:`ValueError` whose message starts with the field to change.
"""

from __future__ import annotations

import os
from pathlib import Path

from titan_cfg.model_spec import config_shape
from titan_cfg.scenarios import SCENARIOS, on_node
from titanflow import paths
from titanflow.hub_id import is_hub_id
from titanflow.launch.kubernetes import pods
from titanflow.launch.slurm.job import check_submission
from titanflow.params import ScenarioRun, new_run_id
from titanflow.run.checks import check_cuda, check_upstream, run_checks
from titanflow.run.disk import check_space
from titanflow.run.model_config import check_trim_fits, embedded_config, trained_config
from titanflow.weights.fit import check_hub_weights, check_shape_fits, check_weights_folder


def check_pretrained_weights_given(run: ScenarioRun) -> None:
    """Pretrained init off cpu names its weights: without them a run (or a render) would pretrain the embedded
    tiny model's checkpoint on this machine's CPU (titanflow.run.pretrained: compute) and train a model that
    is no model of the target.

    Raises:
        ValueError: naming ``weights`` and, where the target's deployments have them, the weights to pass.
    """
    if run.init != "pretrained" or run.weights is not None or run.target_spec.device == "cpu":
        return
    usual = on_node(run.scenario, run.target_spec.node).weights
    raise ValueError(f"weights: none given for init pretrained on {run.target}; the embedded tiny model's pretrained "
                     "checkpoint would be pretrained on this machine's CPU first and is no model of the target; fix: pass "
                     "--weights a Hugging Face folder or Hub id" + (f" (the {run.target} deployments': --weights "
                                                                     f"{usual})" if usual else ""))


def require_ready(run: ScenarioRun) -> None:
    """The checks of a scenario run on trn2 before anything else: titanflow doctor's (titanflow.run.checks), less the
    weights.

    Raises:
        ValueError: ``target: ...`` with one line per failed check and its fix.
    """
    # the upstream names are resolved in a Python of their own (seconds): only once everything else holds
    failed = [check for check in run_checks(run, run.weights, with_weights=False, with_upstream=False) if not check.ok]
    if not failed and not (upstream_names := check_upstream(run.target_spec.node, run.scenario)).ok:
        failed = [upstream_names]
    if failed:
        raise ValueError(f"target: {run.target} is not ready on this machine (`titanflow doctor --target {run.target}` "
                         f"shows every check; `titanflow render {run.scenario} --target {run.target}` writes the job "
                         "files anywhere):\n" + "\n".join(check.line() for check in failed))


def check_this_machine(run: ScenarioRun) -> None:
    """This machine can run the target's ranks: on trn2 every check of titanflow doctor, on cuda its GPUs, else the
    target's runtime (titan_cfg.targets.Target.missing_runtime).

    Raises:
        ValueError: ``target: ...`` with what is missing and the fix.
    """
    device = run.target_spec.device
    if device == "neuron":  # every missing piece of the node at once: titanflow doctor's checks
        require_ready(run)
    elif device == "cuda":  # GPUs for the run's own ranks
        gpus = check_cuda(run)
        if not gpus.ok:
            raise ValueError(f"target: {run.target} cannot run on this machine: {gpus.detail}; fix: {gpus.fix} "
                             f"(`titanflow render {run.scenario} --target {run.target}` writes its job files)")
    else:
        missing = run.target_spec.missing_runtime()
        if missing:
            raise ValueError(f"target: {run.target} cannot run on this machine: {missing}; fix: "
                             f"run it where it can; `titanflow render {run.scenario} --target {run.target}` writes its job files")


def check_pod_zero(nnodes: int) -> None:
    """A run on Kubernetes trains from pod 0 of a titanflow Kubernetes job (titanflow.launch.kubernetes.pod), whose pod
    count is the run's ``nnodes``.

    Raises:
        ValueError: ``scheduler: ...`` when this process is not pod 0 of one, ``nnodes: ...`` when the job has
            another number of pods, each with the fix.
    """
    try:
        pods.group()
        index = pods.index()
    except pods.PodError as err:
        raise ValueError(f"scheduler: kubernetes trains from pod 0 of a titanflow Kubernetes job, and {err}; fix: run "
                         "it through the trn2-eks work pool (deployments/prefect.yaml), or pass --scheduler slurm") from None
    if index != 0:
        raise ValueError(f"scheduler: this is pod {index} of the Kubernetes job, which runs a torchrun agent; the flow "
                         "runs in pod 0 (titanflow.launch.kubernetes.pod)")
    pods_count = os.environ.get(pods.POD_COUNT_ENV, "").strip()  # "2 " (titanflow.launch.kubernetes.template)
    if pods_count and pods_count != str(nnodes):
        raise ValueError(f"nnodes: the run asks for {nnodes} nodes but its Kubernetes job has {pods_count} pods; fix: "
                         f"give the flow run the job variable nnodes={nnodes} (prefect deployment run ... --job-variable "
                         f"nnodes={nnodes}), or --nnodes {pods_count}")


def preflight(run: ScenarioRun, *, launch: bool = True) -> Path:
    """Check everything checkable without compute; return the (not yet created) run folder, or for
    ``run.resume`` the resumed run's folder, which must exist (titanflow.run.resume checks the rest).

    ``launch=False`` (rendering only) skips the check that this machine can run the target; a run on Slurm
    (``run.scheduler_resolved``) is checked by Slurm instead (``sbatch --test-only``: titanflow.launch.slurm.job.check_submission).

    Raises:
        ValueError: the message starts with the field to change.
    """
    check_pretrained_weights_given(run)
    if launch and run.scheduler_resolved == "kubernetes":
        check_pod_zero(run.nnodes_resolved)
    elif launch and run.scheduler_resolved == "slurm":  # its nodes run it, not this machine: Slurm says now whether it would
        check_submission(run.nnodes_resolved, run.timeout_s)
    elif launch:
        check_this_machine(run)
    root = run.runs_root()
    paths.check_runs_dir_writable(root)
    paths.check_writable(paths.cache_root(), "TITANFLOW_CACHE", "export TITANFLOW_CACHE=<a folder you can write> (the "
                                                                "built assets, compile caches and trims live there)")
    if launch:  # the judge reads the node's baselines there and the run is appended there
        paths.check_writable(paths.history_root(), "TITANFLOW_HISTORY", "export TITANFLOW_HISTORY=<a folder you can "
                             "write> (the run history and the node's baselines live there)")
    run_dir = root / (run.resume or run.run_id or new_run_id(run))
    if run.resume is not None and not run_dir.is_dir():
        raise ValueError(f"resume: no run folder {run_dir}; fix: pass the id of a run under {root} (--runs-dir names "
                         "another parent)")
    if run_dir.exists() and run.resume is None:
        raise ValueError(f"run_id: {run_dir} already exists; fix: pass another run id, or none for a fresh one "
                         f"(--resume {run_dir.name} continues it)")
    if run.weights is None:  # the embedded tiny model (random or its pretrained checkpoint), checked before it is built
        check_shape_fits(run, config_shape(embedded_config(run), SCENARIOS[run.scenario].model_type))
    elif not is_hub_id(run.weights):
        check_weights_folder(run, Path(run.weights).expanduser().resolve(), complete=launch)
    else:  # render_config checks the folder whole once pull_weights has it
        check_hub_weights(run)
    check_trim_fits(run)
    if launch and run.resume is None and (config := trained_config(run)) is not None:
        check_space(run, config)
    return run_dir
