"""Rendering: a ScenarioRun and a weights folder become ``runs/<id>/job/`` and the torchrun line.

Files written (all a reviewer needs to rerun the job by hand):
  job.json             the resolved job (titan_cfg.job.Job)
  launch.json          torchrun argv and the environment the ranks get
  launch.sh            the same as a shell script; for a job on Slurm (more than one node, or a target
                       Slurm schedules) the batch script, one torchrun agent per node
                       (titanflow.launch.slurm.batch), which ``sbatch launch.sh`` submits as it is; for a
                       job on Kubernetes what each pod runs (titanflow.launch.kubernetes.launch)
  trainer_config.json  torchtitan's config of the job (titan_cfg.config_json's view), built
                       in this process, so a config torchtitan rejects fails here, before
                       any rank starts
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from titan_cfg.compile_cache import cache_env
from titan_cfg.config_json import to_plain
from titan_cfg.job import JOB_ENV, JOB_FILE, Job
from titan_cfg.published import Workload, published_for_job
from titan_cfg.targets import TARGETS
from titan_cfg.trainer_config import build as build_trainer_config
from titan_cfg.window import WindowError
from titanflow import paths
from titanflow.launch.dataset import locate as locate_dataset
from titanflow.launch.kubernetes.launch import pod_script
from titanflow.launch.node import RDZV_ENDPOINT_ENV, RDZV_ID_ENV
from titanflow.launch.slurm.batch import batch_script
from titanflow.params import ScenarioRun
from titanflow.weights.fit import check_weights_folder
from titanflow.weights.identity import weights_id as weights_id_of

#: torchrun's module entry: applies the target's compat layer, then torchtitan.train.
ENTRY = ["-m", "titan_cfg.entry"]
#: The same entry for a target that forks its ranks (``Target.fork_ranks``): torchrun's function entry, started in a
#: fork of titan_cfg.forked_torchrun, which has imported torchtitan once for every rank.
FORKED_ENTRY = ["--start-method", "fork", "--run-path", str(paths.REPO_ROOT / "titan_cfg" / "forked_rank.py")]
#: torchtitan's own arguments: the job's config, from titan_cfg.config_registry.
TRAINER_ARGS = ["--module", "titan_cfg.config_registry", "--config", "titanflow_job"]


class RenderError(ValueError):
    """The run cannot be rendered into a job; the message names the field and the fix."""


class RenderedJob(BaseModel):
    """Paths and launch line of a rendered job (argv[0] is resolved on the launching machine)."""

    run_dir: str
    job_path: str
    argv: list[str]
    env: dict[str, str]
    trainer_config_path: str
    dataset: str = "botchan"  # the text's name (titanflow.launch.dataset)
    # local: torchrun here; slurm: launch.sh is a Slurm batch script (titanflow.launch.slurm); kubernetes: launch.sh is what
    # each pod of the Kubernetes job runs (titanflow.launch.kubernetes)
    scheduler: str = "local"


def make_job(run: ScenarioRun, weights_dir: Path, run_dir: Path, files_only: bool = False) -> Job:
    """Resolve ``run`` against the target and the weights folder: the dataset of the target
    (titanflow.launch.dataset), the weights id (titanflow.weights.identity) and the published
    first-step loss that applies (titan_cfg.published).

    ``files_only`` (``titanflow render``): the job is written to be read, not run, so the weights folder
    needs only its config.json and the dataset may be absent (where it was looked for is recorded).

    Raises:
        ValueError: the folder does not fit the run (titanflow.weights.fit.check_weights_folder), or
            the dataset is absent for a job that will run.
    """
    target = run.target_spec
    shape = check_weights_folder(run, weights_dir, complete=not files_only)
    dataset = locate_dataset(target.dataset)
    if not dataset.present and not files_only:
        raise RenderError(f"dataset: {target.dataset} not found at {dataset.path} (looked for {dataset.located_by}); "
                          "install the torchtitan fork from its checkout, or set $TITANFLOW_C4_TEST to the folder")
    local_batch_size = run.global_batch_size_resolved // run.world_size
    weights_id = weights_id_of(run.weights, weights_dir)
    published = published_for_job(run.scenario, target.node, run.init, weights_id, Workload(
        dataset=dataset.name, world_size=run.world_size, local_batch_size=local_batch_size,
        seq_len=run.seq_len_resolved))
    return Job(
        run_id=run_dir.name,
        scenario=run.scenario,
        target=target.name,
        init=run.init,
        weights_dir=str(weights_dir),
        shape=shape,
        world_size=run.world_size,
        nnodes=run.nnodes_resolved,
        scheduler=run.scheduler_resolved,
        dataset_path=dataset.path,
        dataset=dataset.name,
        dataset_located_by=dataset.located_by + ("" if dataset.present else "; absent where this job was rendered"),
        dump_folder=str(run_dir / "train"),
        steps=run.steps,
        checkpoint_interval=run.checkpoint_interval_resolved,
        global_batch_size=run.global_batch_size_resolved,
        local_batch_size=local_batch_size,
        seq_len=run.seq_len_resolved,
        lr=run.lr,
        warmup_steps=run.warmup_steps_resolved,
        seed=run.seed,
        export_dtype=run.export_dtype_resolved,
        compile=run.compile,
        kernels=run.kernels_resolved,
        spmd_backend=target.spmd_backend,
        compile_backend=target.compile_backend,
        activation_checkpoint=run.activation_checkpoint_resolved,
        load_balance_coeff=run.load_balance_coeff_resolved,
        mixed_precision_param=target.mixed_precision_param,
        weights_id=weights_id,
        published=published,
        model_spec=run.model_spec,
        files_only=files_only,
    )


#: Placeholders in a multi-node job's torchrun line, given their value on each node by titanflow.launch.node (which
#: names the variables).
NODE_PLACEHOLDERS = {"endpoint": f"${{{RDZV_ENDPOINT_ENV}}}", "rdzv_id": f"${{{RDZV_ID_ENV}}}",
                     "node": "${TITANFLOW_NODE}"}
#: torchrun's console prefix with the global rank (``[default0]:`` is rank 0 on whichever node it runs), so that
#: the node holding rank 0 is known from its log (one node: the local rank is the global rank, same prefix).
RANK_PREFIX = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${role_name}${rank}]:"}


def torchrun_line(job: Job) -> list[str]:
    """torchrun's arguments up to the entry module: ``--standalone`` for a local job; on Slurm or Kubernetes, c10d
    rendezvous on the first node (:data:`NODE_PLACEHOLDERS`) with the target's join timeout and no restarts (a
    failed node ends the launch; the train task's retry relaunches it), every node's rank logs under
    ``train/ranks/<node>``. A target that forks its ranks runs torchrun through titan_cfg.forked_torchrun (same
    arguments)."""
    ranks = Path(job.dump_folder) / "ranks"
    console = ["--tee", "3", "--local-ranks-filter", "0"]
    target = TARGETS[job.target]()
    torchrun = ["python", "-m", "titan_cfg.forked_torchrun"] if target.fork_ranks else ["torchrun"]
    if job.scheduler == "local":
        return [*torchrun, "--standalone", f"--nproc_per_node={job.world_size}", "--log-dir", str(ranks), *console]
    return [*torchrun, f"--nnodes={job.nnodes}", f"--nproc_per_node={job.nproc_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={NODE_PLACEHOLDERS['endpoint']}",
            f"--rdzv-id={NODE_PLACEHOLDERS['rdzv_id']}", f"--rdzv-conf=join_timeout={target.rdzv_join_timeout_s}",
            "--max-restarts=0", "--log-dir", str(ranks / NODE_PLACEHOLDERS["node"]), *console]


def with_callers_tunables(target_env: dict[str, str]) -> dict[str, str]:
    """``GLIBC_TUNABLES`` for the ranks when both the target (the cpu target's huge pages) and the caller's environment
    set it: the caller's tunables, then each of the target's the caller does not set (glibc reads the
    ``name=value`` pairs joined by ``:``), so a caller's ``glibc.malloc.hugetlb=0`` turns the target's off and its
    other tunables are kept. Empty when either does not set it (the target's own value, or none, applies)."""
    ours, callers = target_env.get("GLIBC_TUNABLES"), os.environ.get("GLIBC_TUNABLES")
    if not ours or not callers:
        return {}
    named = {pair.split("=", 1)[0] for pair in callers.split(":") if pair}
    added = [pair for pair in ours.split(":") if pair and pair.split("=", 1)[0] not in named]
    return {"GLIBC_TUNABLES": ":".join([callers, *added])}


def launch_line(job: Job, job_path: Path) -> tuple[list[str], dict[str, str]]:
    """torchrun argv (:func:`torchrun_line`: local rank 0 on the console, every rank's log under ``train/ranks``)
    and rank env; one node: ``--nproc_per_node`` is the job's world size."""
    target = TARGETS[job.target]()
    argv = [*torchrun_line(job), *(FORKED_ENTRY if target.fork_ranks else ENTRY), *TRAINER_ARGS]
    env = {
        **(RANK_PREFIX if job.scheduler != "local" else {}),
        **target.env,
        **with_callers_tunables(target.env),
        **cache_env(job, target, job.shape.model_dump(), paths.cache_root()),
        JOB_ENV: str(job_path),
        "HF_DATASETS_CACHE": str(paths.cache_root() / "hf_datasets"),  # nothing written to ~/.cache
        # torch inductor puts its precompiled headers under tempfile.gettempdir() whatever
        # TORCHINDUCTOR_CACHE_DIR says (torch 2.13 codecache._HEADER_DIR): keep them in the cache too.
        "TMPDIR": str(paths.cache_root() / "tmp"),
        "PYTHONUNBUFFERED": "1",  # lines reach the run log as they are printed
        # titan_cfg importable by every rank, then the caller's own path (a layered install such as
        # `make overlay-trn2`), which the ranks would otherwise lose
        "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
    }
    return argv, env


#: The run folder in a torchtitan config built for a job without its run (:func:`without_run`): a path no run has.
RUN_PLACEHOLDER = "/titanflow-run-folder"


def without_run(job: Job) -> Job:
    """``job`` as every run of it has it: the run id and the run folder replaced by :data:`RUN_PLACEHOLDER`
    (torchtitan's config of it is the same for every run id, then :func:`placed` in a run's folder)."""
    return job.model_copy(update={"run_id": "run", "dump_folder": f"{RUN_PLACEHOLDER}/train"})


def build_config(job: Job) -> dict:
    """torchtitan's config of ``job`` (titan_cfg.trainer_config) as titan_cfg.config_json's JSON view, built in
    this process: no tensors are made, and torchtitan's import (about 5 s: torch, datasets,
    torch.distributed.checkpoint) is paid once by the process that later checks the export with the same
    libraries (titanflow.export.imports), not again by a process of its own. Importing torchtitan needs only
    the import-only fix of titan_cfg.compat.cpu; the target's compat layers change training, and are applied
    in the ranks alone (titan_cfg.entry). One kernel installer reaches past the config: ``attention=sdpa`` for the
    transformers backend sets the backend's model module's attention function (titan_cfg.kernels.attention), here
    too, where that module never runs a model (the export's checks load transformers' own).

    Raises:
        RenderError: torchtitan rejected the config (the message names the exception and its text).
        titan_cfg.window.WindowError: the installed torchtitan cannot serve the scenario (titan_cfg.window).
    """
    from titan_cfg.compat.cpu import make_importable_without_triton  # lazy: torch

    make_importable_without_triton()  # import-only: torchtitan's EP kernels module wants triton
    try:
        config = build_trainer_config(job)
    except WindowError:  # the installed torchtitan, not the input: an environment failure
        raise
    except Exception as err:  # noqa: BLE001 - whatever torchtitan raises, the run cannot start with it
        raise RenderError(f"torchtitan rejected the rendered config: {type(err).__name__}: {err}") from err
    return json.loads(json.dumps(to_plain(config)))  # as written to trainer_config.json: lists, not tuples


def placed(config: dict, job: Job) -> dict:
    """A config built for :func:`without_run` of ``job`` with the run's own folder: every string that starts with
    ``<RUN_PLACEHOLDER>/train`` starts with the job's ``dump_folder`` instead (today only ``dump_folder`` does)."""
    placeholder = f"{RUN_PLACEHOLDER}/train"

    def put(value):
        if isinstance(value, dict):
            return {k: put(v) for k, v in value.items()}
        if isinstance(value, list):
            return [put(v) for v in value]
        if isinstance(value, str) and (value == placeholder or value.startswith(placeholder + "/")):
            return job.dump_folder + value[len(placeholder):]
        return value

    return put(config)


def render(run: ScenarioRun, weights_dir: Path, run_dir: Path, files_only: bool = False,
           trainer_config: Callable[[Job, dict[str, str]], dict] | None = None) -> RenderedJob:
    """Write ``run_dir/job/`` (module docstring) and return where everything is; ``files_only``: see
    :func:`make_job`. ``trainer_config(job, env)``: torchtitan's config of :func:`without_run` of the job, e.g.
    a cached :func:`build_config` (titanflow.tasks.render), placed in the run's folder; None: :func:`build_config`.

    Raises:
        RenderError: as :func:`make_job` and :func:`build_config`.
    """
    job_dir = run_dir / "job"
    job_dir.mkdir(parents=True, exist_ok=True)
    job = make_job(run, weights_dir, run_dir, files_only)
    job_path = job.write(job_dir / JOB_FILE)
    (paths.cache_root() / "tmp").mkdir(parents=True, exist_ok=True)
    argv, env = launch_line(job, job_path)
    (job_dir / "launch.json").write_text(json.dumps({"argv": argv, "env": env}, indent=2, sort_keys=True) + "\n")
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    if job.scheduler == "slurm":
        script = batch_script(job, argv, exports)
    elif job.scheduler == "kubernetes":
        script = pod_script(job, argv, exports)
    else:
        script = f"#!/usr/bin/env bash\nset -euo pipefail\n{exports}exec {shlex.join(argv)}\n"
    (job_dir / "launch.sh").write_text(script)
    config_path = job_dir / "trainer_config.json"
    build = trainer_config or (lambda unplaced, _env: build_config(unplaced))
    config_path.write_text(json.dumps(placed(build(without_run(job), env), job), indent=2, sort_keys=True) + "\n")
    return RenderedJob(run_dir=str(run_dir), job_path=str(job_path), argv=argv, env=env,
                       trainer_config_path=str(config_path), dataset=job.dataset,
                       scheduler=job.scheduler)
