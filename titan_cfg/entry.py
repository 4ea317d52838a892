"""The module torchrun runs on every rank: apply the target's compat layer, then
hand over to ``torchtitan.train``.

    TITANFLOW_JOB=runs/<id>/job/job.json torchrun --nproc_per_node=2 \\
        -m titan_cfg.entry --module titan_cfg.config_registry --config titanflow_job
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from titan_cfg.compat import apply as apply_compat
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.job import JOB_ENV, Job


def main() -> None:
    """torchrun entry: compat for the job's target, the parity probe and the step-1 batch record
    (titan_cfg.first_batch), then torchtitan's trainer main."""
    from titan_cfg.scenarios import SCENARIOS

    job = Job.read(Path(os.environ[JOB_ENV]))
    from titan_cfg.targets import TARGETS

    applied = apply_compat(TARGETS[job.target]().node, SCENARIOS[job.scenario].compat)  # trn2-cluster: trn2's
    make_importable_without_triton()
    if applied and os.environ.get("RANK", "0") == "0":
        print(f"titanflow: compat patches applied: {', '.join(applied)}", flush=True)
    from titan_cfg import first_batch, probe
    from torchtitan.train import main as torchtitan_main

    probe.install(Path(job.weights_dir), Path(job.dump_folder), tied_checkpoint=job.tied)
    first_batch.install(Path(job.dump_folder), document_mask=SCENARIOS[job.scenario].document_mask)

    torchtitan_main()
    # Python's collections at exit walk every object torch and torchtitan left alive; frozen, they skip them
    # (titanflow.cli.console does the same for the flow process). Atexit handlers run as before.
    gc.freeze()


if __name__ == "__main__":
    main()
