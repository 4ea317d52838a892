"""A Hugging Face model folder as both ends of a run read it: the weights it trains from (titanflow.weights) and the
export it writes (titanflow.export). The shard index's name, the tokenizer and generation files that travel with the
weights, every shard's safetensors header, and the checkpoint keys a loaded model's state dict comes from.
"""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError, safe_open

#: The index of a sharded safetensors checkpoint: {"weight_map": {tensor name: shard file name}}.
INDEX = "model.safetensors.index.json"

#: Files copied from the weights folder when present (tokenizer and generation settings).
SIDE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "merges.txt", "chat_template.jinja")


def read_headers(export_dir: Path) -> dict[str, dict[str, tuple[str, list[int]]]]:
    """{shard file name: {tensor name: (dtype code, shape)}} for every ``*.safetensors`` in the folder.

    Raises:
        ValueError: a shard whose header cannot be read (truncated or not safetensors), naming the file.
    """
    headers = {}
    for shard in sorted(export_dir.glob("*.safetensors")):
        try:
            with safe_open(shard, "pt") as f:
                headers[shard.name] = {k: (f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape()))
                                       for k in f.keys()}
        except (SafetensorError, OSError) as err:
            raise ValueError(f"export: {shard} cannot be read as safetensors ({err}); the file is damaged") from err
    return headers


def checkpoint_keys(model) -> set[str]:
    """The checkpoint keys ``model``'s state dict is loaded from: its own keys, except those transformers
    builds by merging checkpoint tensors (its conversion mapping for the model_type, e.g. Qwen3 MoE's
    ``mlp.experts.gate_up_proj`` [E, 2F, D] from ``mlp.experts.{e}.gate_proj/up_proj.weight``), which
    are replaced by their sources, ``*`` taking every expert index 0..num_experts-1."""
    from transformers.conversion_mapping import WeightConverter, get_checkpoint_conversion_mapping

    converters = [c for c in get_checkpoint_conversion_mapping(model.config.model_type) or []
                  if isinstance(c, WeightConverter)]
    experts = range(getattr(model.config, "num_experts", 0) or 0)
    keys = set()
    for key in model.state_dict():
        converter = next((c for c in converters for t in c.target_patterns if key.endswith(t)), None)
        if converter is None:
            keys.add(key)
            continue
        prefix = key[: -len(next(t for t in converter.target_patterns if key.endswith(t)))]
        keys |= {prefix + source.replace("*", str(e)) for source in converter.source_patterns for e in experts}
    return keys
