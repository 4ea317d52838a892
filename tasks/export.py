"""export: turn torchtitan's last-step HF save into a complete Hugging Face folder.

torchtitan's ``last_save_in_hf`` writes ``<dump>/checkpoint/step-N/`` with the
``model-*.safetensors`` shards, ``model.safetensors.index.json`` and a leftover
``sharded/`` folder, but no config.json and no tokenizer. The export is those
shards and index plus the weights folder's config.json (``dtype`` set to the
export dtype), generation config and tokenizer files. It is assembled under
``runs/<id>/export.partial/`` and renamed to ``export/`` only when complete, so
an ``export/`` folder is never half-written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job

#: Files copied from the weights folder when present (tokenizer and generation settings).
SIDE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "merges.txt", "chat_template.jinja")
INDEX = "model.safetensors.index.json"


class ExportError(RuntimeError):
    """torchtitan's save is missing or incomplete; the message names the file."""


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link (no second copy of the weights on disk), or copy across filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def assemble_export(job: Job, run_dir: Path) -> Path:
    """Build ``run_dir/export`` from the job's last-step save; return its path.

    Raises:
        ExportError: step folder, index or a shard named by the index is missing.
    """
    step_dir = job.export_step_dir
    index_path = step_dir / INDEX
    if not index_path.is_file():
        raise ExportError(f"export: {index_path} not found; torchtitan did not finish its HF save")
    shards = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
    missing = [name for name in shards if not (step_dir / name).is_file()]
    if missing:
        raise ExportError(f"export: {step_dir} lacks {', '.join(missing)} named by its index")

    final, partial = run_dir / "export", run_dir / "export.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for name in [INDEX, *shards]:
        _link_or_copy(step_dir / name, partial / name)
    weights_dir = Path(job.weights_dir)
    config = json.loads((weights_dir / "config.json").read_text())
    config["dtype"] = job.export_dtype
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in SIDE_FILES:
        if (weights_dir / name).is_file():
            shutil.copy2(weights_dir / name, partial / name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    return final


@task(name="export")
def export(job_path: str, run_dir: str) -> str:
    """Prefect task: :func:`assemble_export`; returns the export folder."""
    folder = assemble_export(Job.read(Path(job_path)), Path(run_dir))
    get_run_logger().info("export: %s (%s)", folder, ", ".join(sorted(p.name for p in folder.iterdir())))
    return str(folder)
