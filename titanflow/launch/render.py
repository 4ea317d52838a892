"""Rendering: a ScenarioRun and a weights folder become ``runs/<id>/job/`` and the torchrun line.

Files written (all a reviewer needs to rerun the job by hand):
  job.json             the resolved job (titan_cfg.job.Job)
  launch.json          torchrun argv and the environment the ranks get
  launch.sh            the same as a shell script
  trainer_config.json  torchtitan's Trainer.Config.to_dict() of the job, built
                       in a subprocess by the torchrun entry module, so a config
                       torchtitan rejects fails here, before any rank starts
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from titan_cfg.compile_cache import cache_env
from titan_cfg.job import JOB_ENV, JOB_FILE, Job
from titan_cfg.targets import TARGETS
from titanflow import paths
from titanflow.judge.published import Workload, published_for_job
from titanflow.launch.dataset import locate as locate_dataset
from titanflow.run.params import ScenarioRun
from titanflow.run.preflight import check_weights_folder
from titanflow.weights.identity import weights_id as weights_id_of

#: torchrun's module entry: applies the target's compat layer, then torchtitan.train.
ENTRY = ["-m", "titan_cfg.entry", "--module", "titan_cfg.config_registry", "--config", "titanflow_job"]


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


def make_job(run: ScenarioRun, weights_dir: Path, run_dir: Path, files_only: bool = False) -> Job:
    """Resolve ``run`` against the target and the weights folder: the dataset of the target
    (titanflow.launch.dataset), the weights id (titanflow.weights.identity) and the published
    first-step loss that applies (titanflow.judge.published).

    ``files_only`` (``titanflow render``): the job is written to be read, not run, so the weights folder
    needs only its config.json and the dataset may be absent (where it was looked for is recorded).

    Raises:
        ValueError: the folder does not fit the run (titanflow.run.preflight.check_weights_folder), or
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
    published = published_for_job(run.scenario, target.name, run.init, weights_id, Workload(
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
        export_dtype=run.export_dtype,
        compile=run.compile,
        kernels=run.kernels_resolved,
        spmd_backend=target.spmd_backend,
        compile_backend=target.compile_backend,
        activation_checkpoint=target.activation_checkpoint,
        mixed_precision_param=target.mixed_precision_param,
        weights_id=weights_id,
        published=published,
        model_spec=run.model_spec,
        files_only=files_only,
    )


def launch_line(job: Job, job_path: Path) -> tuple[list[str], dict[str, str]]:
    """torchrun argv (rank 0 on the console, every rank's log under ``train/ranks``) and rank env;
    ``--nproc_per_node`` is the job's world size (one node)."""
    target = TARGETS[job.target]()
    argv = [
        "torchrun", "--standalone", f"--nproc_per_node={job.world_size}",
        "--log-dir", str(Path(job.dump_folder) / "ranks"), "--tee", "3", "--local-ranks-filter", "0",
        *ENTRY,
    ]
    env = {
        **target.env,
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


def build_trainer_config(job_path: Path, out_path: Path, env: dict[str, str]) -> None:
    """Build torchtitan's config of the job in a subprocess and write it as JSON.

    Raises:
        RenderError: torchtitan rejected the config; carries the last lines of its error.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "titan_cfg.entry", "--render", str(job_path), str(out_path)],
        capture_output=True, text=True, env={**os.environ, **env}, cwd=paths.REPO_ROOT,
    )
    if proc.returncode:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise RenderError(f"torchtitan rejected the rendered config:\n{tail}")


def render(run: ScenarioRun, weights_dir: Path, run_dir: Path, files_only: bool = False) -> RenderedJob:
    """Write ``run_dir/job/`` (module docstring) and return where everything is; ``files_only``: see
    :func:`make_job`."""
    job_dir = run_dir / "job"
    job_dir.mkdir(parents=True, exist_ok=True)
    job = make_job(run, weights_dir, run_dir, files_only)
    job_path = job.write(job_dir / JOB_FILE)
    (paths.cache_root() / "tmp").mkdir(parents=True, exist_ok=True)
    argv, env = launch_line(job, job_path)
    (job_dir / "launch.json").write_text(json.dumps({"argv": argv, "env": env}, indent=2, sort_keys=True) + "\n")
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    (job_dir / "launch.sh").write_text(f"#!/usr/bin/env bash\nset -euo pipefail\n{exports}exec {shlex.join(argv)}\n")
    trainer_config = job_dir / "trainer_config.json"
    build_trainer_config(job_path, trainer_config, env)
    return RenderedJob(run_dir=str(run_dir), job_path=str(job_path), argv=argv, env=env,
                       trainer_config_path=str(trainer_config), dataset=job.dataset)
