"""The module torchrun runs on every rank: apply the target's compat layer, then
hand over to ``torchtitan.train``.

    TITANFLOW_JOB=runs/<id>/job/job.json torchrun --nproc_per_node=2 \\
        -m titan_cfg.entry --module titan_cfg.config_registry --config titanflow_job

``python -m titan_cfg.entry --render JOB OUT`` instead builds the job's
torchtitan config without training and writes it as JSON (render_config uses
it, so a bad config fails before any rank starts).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from titan_cfg.compat import apply as apply_compat
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.job import JOB_ENV, Job


def render(job_path: Path, out_path: Path) -> None:
    """Write the job's torchtitan config (``titan_cfg.config_json`` view) as JSON to ``out_path``."""
    make_importable_without_triton()  # import-only fix; changes no behaviour
    from titan_cfg import trainer_config
    from titan_cfg.config_json import to_plain

    config = trainer_config.build(Job.read(job_path))
    out_path.write_text(json.dumps(to_plain(config), indent=2, sort_keys=True) + "\n")


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


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--render":
        render(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
