"""The export: torchtitan's last-step HF save made a complete Hugging Face folder.

torchtitan's ``last_save_in_hf`` writes ``<dump>/checkpoint/step-N/`` with the
``model-*.safetensors`` shards, ``model.safetensors.index.json`` and a leftover
``sharded/`` folder, but no config.json and no tokenizer. The export is those
shards and index plus the weights folder's config.json (``dtype`` set to the
export dtype), generation config and tokenizer files. It is assembled under
``runs/<id>/export.partial/`` and renamed to ``export/`` only when complete, so
an ``export/`` folder is never half-written.

When training untied a tied checkpoint's lm_head (torchtitan's transformers
backend does, see titan_cfg.probe), the trained head is added as its own shard
and config.json says ``tie_word_embeddings: false``: the export is the model
that was trained, and summary.json records the change.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from titan_cfg.job import Job
from titan_cfg.probe import UNTIED_HEAD_FILE
from titan_cfg.scenarios import trained_rope_theta
from titanflow.hf_folder import INDEX, SIDE_FILES
from titanflow.results import ExportResult

class ExportError(RuntimeError):
    """torchtitan's save is missing or incomplete; the message names the file."""


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link (no second copy of the weights on disk), or copy across filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _set_rope_theta(config: dict, theta: float) -> None:
    """Write the RoPE base ``theta`` into ``config`` (a config.json's contents) wherever it says one: transformers
    5.x's ``rope_parameters.rope_theta``, 4.x's ``rope_theta``; nothing changes when it already says ``theta``."""
    if isinstance(config.get("rope_parameters"), dict) and "rope_theta" in config["rope_parameters"]:
        config["rope_parameters"]["rope_theta"] = theta
    if "rope_theta" in config or not isinstance(config.get("rope_parameters"), dict):
        config["rope_theta"] = theta


def _add_untied_head(head_file: Path, export_dir: Path, export_dtype: str) -> None:
    """Write the trained lm_head as shard ``model-lm_head.safetensors`` in ``export_dtype`` and index it."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = {k: v.to(getattr(torch, export_dtype)) for k, v in load_file(head_file).items()}
    save_file(tensors, export_dir / "model-lm_head.safetensors", metadata={"format": "pt"})
    index = json.loads((export_dir / INDEX).read_text())
    index["weight_map"].update({name: "model-lm_head.safetensors" for name in tensors})
    (export_dir / INDEX).write_text(json.dumps(index, indent=2) + "\n")


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
    shutil.copy2(index_path, partial / INDEX)  # a copy: the export may rewrite its index
    for name in shards:
        _link_or_copy(step_dir / name, partial / name)
    weights_dir = Path(job.weights_dir)
    config = json.loads((weights_dir / "config.json").read_text())
    config["dtype"] = job.export_dtype
    _set_rope_theta(config, trained_rope_theta(job))  # the trained one (titan_cfg.scenarios.Walkthrough.rope_theta)
    untied_head = Path(job.dump_folder) / UNTIED_HEAD_FILE
    if untied_head.is_file():
        _add_untied_head(untied_head, partial, job.export_dtype)
        config["tie_word_embeddings"] = False
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in SIDE_FILES:
        if (weights_dir / name).is_file():
            shutil.copy2(weights_dir / name, partial / name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    return final


def export_run(job: Job, run_dir: Path) -> ExportResult:
    """:func:`assemble_export`, and whether the export carries an untied head."""
    folder = assemble_export(job, run_dir)
    return ExportResult(export_dir=str(folder), untied_lm_head=(Path(job.dump_folder) / UNTIED_HEAD_FILE).is_file())
