"""A pretrained checkpoint checked before launch: what torchtitan would otherwise find missing inside every rank.

For ``init=pretrained`` the weights folder (a local folder, a Hub snapshot, the embedded pretrained tiny
checkpoint alike) must hold every shard its ``model.safetensors.index.json`` names, every shard's
safetensors header must read, and every tensor the model of its config.json has must be in some shard
with that shape (a tied config's ``lm_head.weight`` excepted). The expected tensors come from
transformers itself: the config's model built on the meta device (no memory, a few seconds), its
state-dict keys mapped to the checkpoint keys they load from (titanflow.hf_folder.checkpoint_keys).
A Hugging Face cache filled file by file can hold a partial snapshot without any error from
huggingface_hub; the message then says how to complete it.

For every init, the folder's ``model.safetensors.index.json`` (when there is one) must name exactly
the tensors the export will hold: torchtitan's HF save shards the trained state dict by that index
(``StateDictAdapter.fqn_to_index_mapping``), and torch's consolidation of the shards keeps only the
tensors the index names, so a key the index lacks (an untied lm_head under a tied checkpoint's
index) would be dropped silently at the last step, and an index of another depth names tensors
that do not exist.
"""

from __future__ import annotations

import json
from pathlib import Path

from titanflow.hf_folder import INDEX, checkpoint_keys, read_headers

#: How many missing or mismatched tensor names a message lists before "and N more".
LISTED = 8


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


def _complete_the_cache(folder: Path, missing: list[str]) -> str:
    """``; fix: ...`` for files missing from a partial Hub snapshot (``.../models--org--name/snapshots/<rev>``),
    else from a folder."""
    parts = folder.parts
    if "snapshots" in parts and parts[parts.index("snapshots") - 1].startswith("models--"):
        repo = parts[parts.index("snapshots") - 1].removeprefix("models--").replace("--", "/")
        return (f"; the Hugging Face cache holds a partial snapshot of {repo}; fix: complete it where there is "
                f"network: hf download {repo} {' '.join(missing)}")
    return "; fix: copy the missing files into the folder, or pass a complete one"


def meta_model(folder: Path):
    """The model of ``folder``'s config.json as transformers builds it (``AutoModelForCausalLM.from_config``), on
    the meta device: shapes without memory, a few seconds even for Qwen3-30B-A3B."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def expected_tensors(folder: Path) -> dict[str, list[int] | None]:
    """{checkpoint key: shape} the model of ``folder``'s config.json loads from (shape None for a key
    transformers fuses after loading, e.g. a Qwen3 MoE expert); a tied config's lm_head is not among them."""
    model = meta_model(folder)
    config = model.config
    own = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    keys = checkpoint_keys(model)
    if config.tie_word_embeddings:
        keys.discard("lm_head.weight")
    return {key: own.get(key) for key in sorted(keys)}


def check_checkpoint(folder: Path) -> None:
    """Check a pretrained weights folder (module docstring) in seconds, before anything launches.

    Raises:
        ValueError: naming ``weights``, the folder, and each missing shard (with how to complete a
            Hub snapshot), unreadable shard, missing tensor or tensor of another shape.
    """
    index = folder / INDEX
    if index.is_file():
        named = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [name for name in named if not (folder / name).is_file()]
        if missing:
            raise ValueError(f"weights: {folder} lacks {', '.join(missing)}, named by {INDEX}"
                             f"{_complete_the_cache(folder, missing)}")
    try:
        headers = read_headers(folder)
    except ValueError as err:
        raise ValueError(f"weights: {err}".replace("export: ", "")) from None
    found = {name: shape for tensors in headers.values() for name, (_, shape) in tensors.items()}
    expected = expected_tensors(folder)
    absent = [key for key in expected if key not in found]
    if absent:
        raise ValueError(f"weights: {folder} lacks tensors its config.json's model loads: {_listed(absent)}; "
                         "the checkpoint is incomplete or of another architecture; fix: pass the complete folder of a "
                         "Qwen3 checkpoint")
    wrong = [f"{key} {found[key]} (expected {shape})" for key, shape in expected.items()
             if shape is not None and found[key] != shape]
    if wrong:
        raise ValueError(f"weights: {folder} has tensors of another shape than its config.json says: "
                         f"{_listed(wrong)}; fix: pass the checkpoint its config.json belongs to")


def check_save_index(folder: Path) -> None:
    """The weights folder's index names exactly the tensors the export will write (module docstring).

    Raises:
        ValueError: naming ``weights``, the index, the tensors it lacks and those it names in excess.
    """
    index = folder / INDEX
    if not index.is_file():
        return  # torchtitan then saves one model.safetensors holding every tensor
    named = set(json.loads(index.read_text())["weight_map"])
    expected = set(expected_tensors(folder))
    lacking = sorted(expected - named)
    excess = sorted(named - expected - {"lm_head.weight"})  # a tied checkpoint's index may still name the head
    if lacking or excess:
        parts = ([f"lacks {_listed(lacking)} (torchtitan's HF save would drop them from the export)"] if lacking
                 else []) + ([f"names {_listed(excess)}, which the config.json's model does not have"] if excess
                             else [])
        raise ValueError(f"weights: {index} {'; '.join(parts)}; the index must match config.json; "
                         "fix: correct or remove the index (without one the export is a single model.safetensors)")
