"""The load level of the export checks: ``transformers.AutoModelForCausalLM`` on the export.

- keys: the model's state-dict keys absent from the safetensors files are exactly
  ``{lm_head.weight}`` for a tied model and nothing for an untied one (an MoE's experts,
  fused in memory by transformers 5.x, are compared as the per-expert keys they load from);
  transformers reports nothing missing (a missing key would be randomly
  initialised), nothing unexpected, nothing mismatched in shape;
- tie: with ``tie_word_embeddings`` the loaded ``lm_head.weight`` is the embedding matrix;
- forward: one forward pass on a fixed sentence gives finite logits.

:func:`check_tied_as_saved` runs the same checks the way the AWS walkthrough's scenario 1 does, for a
tied checkpoint whose export carries the trained head untied (torchtitan's transformers backend): the
export without that head, under the checkpoint's own tied config.json, must load with nothing
missing but ``lm_head.weight`` and tie it to the embedding.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from titan_cfg.probe import PROBE_TEXT
from titanflow.hf_folder import INDEX, checkpoint_keys, read_headers
from titanflow.results import LoadReport


def load_export(export_dir: Path):
    """(model, loading info) of ``AutoModelForCausalLM.from_pretrained`` on the export, fp32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(export_dir, output_loading_info=True, dtype=torch.float32)


def check_export(export_dir: Path, loaded=None, input_ids=None) -> LoadReport:
    """Run the load checks above on ``loaded`` (from :func:`load_export`; loaded here when None).

    ``input_ids``: [1, L] int64 ids of :data:`~titan_cfg.probe.PROBE_TEXT` for the forward, e.g. the probe
    file's (the run's tokenizer, no special tokens); None: encoded here by the export's own tokenizer
    (``AutoTokenizer``, about 0.2 GB resident for Qwen3's vocabulary).
    """
    import torch

    model, info = loaded or load_export(export_dir)
    tied = bool(model.config.tie_word_embeddings)
    in_files = {name for tensors in read_headers(export_dir).values() for name in tensors}
    missing_in_files = sorted(checkpoint_keys(model) - in_files)
    expected_absent = ["lm_head.weight"] if tied else []
    problems = []
    if missing_in_files != expected_absent:
        problems.append(f"keys absent from the files {missing_in_files}, expected {expected_absent}")
    for name in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info[name]:
            problems.append(f"transformers {name}: {sorted(map(str, info[name]))}")
    lm_head_is_embedding = None
    if tied:
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        lm_head_is_embedding = bool(head.data_ptr() == embed.data_ptr() or torch.equal(head, embed))
        if not lm_head_is_embedding:
            problems.append("tie_word_embeddings is true but lm_head differs from embed_tokens after load")
    if input_ids is None:
        from transformers import AutoTokenizer

        input_ids = AutoTokenizer.from_pretrained(export_dir)(PROBE_TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids).logits
    forward_finite = bool(torch.isfinite(logits).all())
    if not forward_finite:
        problems.append("forward pass on the probe sentence gave non-finite logits")
    return LoadReport(
        missing_in_files=missing_in_files,
        missing=sorted(info["missing_keys"]),
        unexpected=sorted(info["unexpected_keys"]),
        mismatched=sorted(map(str, info["mismatched_keys"])),
        tied=tied,
        lm_head_is_embedding=lm_head_is_embedding,
        forward_finite=forward_finite,
        problems=problems,
    )


def check_tied_as_saved(export_dir: Path, input_ids=None) -> LoadReport:
    """:func:`check_export` on the export as the walkthrough loads it (module docstring): a folder beside
    ``export_dir`` with links to its shards except the one holding only ``lm_head.weight``, its index
    without that key, and its config.json with ``tie_word_embeddings: true``; removed afterwards.
    ``input_ids`` as in :func:`check_export`.

    Raises:
        ValueError: the export has no index naming lm_head.weight in a shard of its own (nothing to untie).
    """
    index = json.loads((export_dir / INDEX).read_text())
    head_shard = index["weight_map"].get("lm_head.weight")
    if head_shard is None or any(s == head_shard for k, s in index["weight_map"].items() if k != "lm_head.weight"):
        raise ValueError(f"export: {export_dir / INDEX} names no shard holding lm_head.weight alone; "
                         "there is no untied head to leave out")
    with tempfile.TemporaryDirectory(prefix=".tied-as-saved-", dir=export_dir.parent) as folder:
        tied = Path(folder)
        for file in export_dir.iterdir():
            if file.is_file() and file.name not in (head_shard, INDEX, "config.json"):
                os.symlink(file.resolve(), tied / file.name)
        weight_map = {k: s for k, s in index["weight_map"].items() if k != "lm_head.weight"}
        (tied / INDEX).write_text(json.dumps({**index, "weight_map": weight_map}))
        config = json.loads((export_dir / "config.json").read_text())
        (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
        return check_export(tied, input_ids=input_ids)
