"""The module torchrun runs on every rank: apply the target's compat layer, then
hand over to ``torchtitan.train``.

    TITANFLOW_JOB=runs/<id>/job/job.json torchrun --nproc_per_node=2 \\
        -m titan_cfg.entry --module titan_cfg.config_registry --config titanflow_job

A target that forks its ranks (``Target.fork_ranks``: cpu) runs :mod:`titan_cfg.forked_torchrun` instead, which
calls :func:`prepare` once before torchrun forks the ranks; each rank then runs :func:`main` through
:mod:`titan_cfg.forked_rank`, and :func:`prepare` returns what the launcher already did.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from pathlib import Path

import torch

from titan_cfg import first_batch, forms, probe, sdpa_kernel, window
from titan_cfg.compat import apply as apply_compat
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.job import JOB_ENV, Job
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS


@functools.cache
def prepare() -> tuple[Job, tuple[str, ...]]:
    """Read the job (``$TITANFLOW_JOB``), apply the compat layers of its target and scenario, and import
    torchtitan's trainer; returns (the job, the names of the patches applied). Once per process: a forked rank
    inherits the launcher's call and its patches."""
    job = Job.read(Path(os.environ[JOB_ENV]))
    if TARGETS[job.target]().device == "neuron":
        # Registers the neuron device and its collectives with torch before anything is built, as Neuron's
        # torch.distributed guide does; torch's backend autoload would do it on `import torch`, but torch-neuronx's own
        # Qwen3 tutorial turns that off (TORCH_DEVICE_BACKEND_AUTOLOAD=0), and torchtitan's own models never import it.
        import torch_neuronx  # noqa: F401
    applied = apply_compat(TARGETS[job.target]().node, SCENARIOS[job.scenario].compat)  # trn2-cluster: trn2's
    make_importable_without_triton()
    import torchtitan.train  # noqa: F401  (imported here so that a launcher that forks ranks shares it)

    return job, tuple(applied)


def _sdpa(job: Job) -> dict:
    """Which kernel scaled_dot_product_attention takes on this rank's device for the job's attention shape and
    training dtype (titan_cfg.sdpa_kernel.probe): whether torch-neuronx's fused kernel serves a trn2 run."""
    device = TARGETS[job.target]().device
    if device != "cpu":
        device = f"{device}:{os.environ.get('LOCAL_RANK', '0')}"
    return sdpa_kernel.probe(device, job.shape.num_attention_heads, job.seq_len, job.shape.head_dim,
                             getattr(torch, job.mixed_precision_param))


def main() -> None:
    """torchrun entry: compat for the job's target (:func:`prepare`), the parity probe and the step-1 batch record
    (titan_cfg.first_batch), then torchtitan's trainer main."""
    job, applied = prepare()
    if os.environ.get("RANK", "0") == "0":
        if applied:
            print(f"titanflow: compat patches applied: {', '.join(applied)}", flush=True)
        # what decides the window's open rows on a node's first run (titan_cfg.window.record_install)
        installed = window.record_install(Path(job.dump_folder) / window.INSTALL_FILE, job.seed, Path(job.weights_dir),
                                          sdpa=_sdpa(job))
        print(f"titanflow: {installed}", flush=True)
    from torchtitan.train import main as torchtitan_main

    probe.install(Path(job.weights_dir), Path(job.dump_folder), tied_checkpoint=job.tied)
    # attention=causal trains the packed row as one sequence (titan_cfg.packed_row): no document mask whatever the model
    document_mask = SCENARIOS[job.scenario].document_mask and job.kernels.get("attention") != "causal"
    first_batch.install(Path(job.dump_folder), document_mask=document_mask)

    forms.bind_config_argv(sys.argv[1:])  # a base before 2026-06-20 would read the forked launcher's options
    torchtitan_main()
    # Python's collections at exit walk every object torch and torchtitan left alive; frozen, they skip them
    # (titanflow.cli.console does the same for the flow process). Atexit handlers run as before.
    gc.freeze()


if __name__ == "__main__":
    main()
