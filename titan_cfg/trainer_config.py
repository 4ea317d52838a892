"""Build the torchtitan ``Trainer.Config`` of a rendered job: the scenario's base
config, then the edits every run needs (paths, sizes, checkpoint/export, target knobs).

Each edit names the torchtitan field it sets; the order is scenario -> job, so a
reader sees every value that differs from the scenario's upstream config here.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from titan_cfg import forms, kernels, window
from titan_cfg.job import CHECKPOINT_FOLDER, KEEP_LATEST_K, TB_FOLDER, Job
from titan_cfg.scenarios import SCENARIOS

if TYPE_CHECKING:
    from torchtitan.trainer import Trainer


def _unused_load_warning(record: logging.LogRecord) -> bool:
    """A logging filter: False for torchtitan's "initial_load_model_only=True has no effect without an
    initial_load_path", which its config functions' default ``CheckpointManager.Config()`` logs as it is built;
    :func:`build` sets both fields for the run (below), so the line would say nothing true of it."""
    return "has no effect without an initial_load_path" not in record.getMessage()


def build(job: Job) -> "Trainer.Config":
    """The complete torchtitan config for ``job`` (no tensors are created).

    Raises:
        titan_cfg.window.WindowError: the installed torchtitan cannot serve the job's scenario (before anything).
    """
    window.require(job.scenario)
    from torchtitan.components.optimizer import default_adamw

    root = logging.getLogger()  # torchtitan's logger (torchtitan.tools.logging)
    root.addFilter(_unused_load_warning)
    try:
        config = SCENARIOS[job.scenario].build(job)
    finally:
        root.removeFilter(_unused_load_warning)
    config.hf_assets_path = job.weights_dir  # tokenizer (and HF weights) folder
    config.dump_folder = job.dump_folder
    # the job's local dataset (job.dataset, at dataset_path) in the loader form the install offers
    config.dataloader = forms.text_loader(job.dataset_path)
    # the batch in rows or in tokens, as the install counts it (before the kernels: attention=causal reads seq_len)
    config.training = forms.set_batch(
        config.training,
        local_batch_size=job.local_batch_size,
        global_batch_size=job.global_batch_size,
        seq_len=job.seq_len,
        steps=job.steps,
        mixed_precision_param=job.mixed_precision_param,
    )
    # edits the model config (before build, parallelisation and load); attention=causal also the dataloader
    kernels.apply(config, job.kernels)
    config.optimizer = default_adamw(lr=job.lr)
    config.lr_scheduler = dataclasses.replace(config.lr_scheduler, warmup_steps=job.warmup_steps)
    config.parallelism = dataclasses.replace(config.parallelism, data_parallel_shard_degree=-1)
    config.activation_checkpoint = forms.activation_checkpoint(job.activation_checkpoint)  # the install's form
    config.compile = dataclasses.replace(config.compile, enable=job.compile, backend=job.compile_backend or "inductor")
    # every step logged, without colour codes: the lines go to train.log and the Prefect log, not to a terminal;
    # and to TensorBoard event files under <dump_folder>/<TB_FOLDER>/<date-time>/ (rank 0's), the full-precision
    # source titanflow.launch.event_files reads. The field's form is the same at every snapshot of the window and
    # 0.3.0 (MetricsProcessor.Config: enable_tensorboard, save_tb_folder, log_freq), so it takes no adapted form.
    config.metrics = dataclasses.replace(config.metrics, log_freq=1, disable_color_printing=True,
                                         enable_tensorboard=True, save_tb_folder=TB_FOLDER)
    config.debug = dataclasses.replace(config.debug, seed=job.seed)

    # Every checkpoint_interval steps save the full training state (model, optimizer, lr scheduler, dataloader
    # position, step) in DCP format, keeping the newest KEEP_LATEST_K: a retried launch resumes from the newest
    # complete one (titanflow.launch.resume), and torchtitan then ignores initial_load_path by design.
    # Save the last step, model only, as HF safetensors (the export the flow validates);
    # pretrained: first load the weights folder, model only, from HF safetensors.
    pretrained = job.init == "pretrained"
    if pretrained and not job.files_only:  # a files-only render reads config.json alone (Job.files_only)
        check_pretrained_source(Path(job.weights_dir))
    config.checkpoint = dataclasses.replace(
        config.checkpoint,
        enable=True,
        folder=CHECKPOINT_FOLDER,
        interval=job.checkpoint_interval or job.steps,
        keep_latest_k=KEEP_LATEST_K,
        last_save_model_only=True,
        last_save_in_hf=True,
        export_dtype=job.export_dtype,
        initial_load_path=job.weights_dir if pretrained else None,
        initial_load_in_hf=pretrained,
        initial_load_model_only=pretrained,  # True without a load path: torchtitan warns it has no effect
    )
    return config


def check_pretrained_source(weights_dir: Path) -> None:
    """Refuse a pretrained load torchtitan would skip or misread: relative path, no safetensors.

    torchtitan resolves a relative ``initial_load_path`` against the working directory, and a
    folder without weights gives a model that silently trains from its random init.

    Raises:
        ValueError: naming ``weights`` and the fix.
    """
    if not weights_dir.is_absolute():
        raise ValueError(f"weights: {weights_dir} is relative; a pretrained load needs an absolute folder")
    if not any(weights_dir.glob("*.safetensors")):
        raise ValueError(f"weights: {weights_dir} holds no *.safetensors; nothing to load for init=pretrained")
