"""Structure of an exported Hugging Face folder, read from files and safetensors headers only.

Nothing is loaded into a model: the index must name every tensor of every
shard exactly once, every floating tensor must be in the export dtype, and
config.json must describe the tensors that are there (tie flag against the
presence of ``lm_head.weight``, layer count, hidden size, heads, head_dim,
vocabulary) and carry the RoPE base the model was trained with.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from titan_cfg.model_spec import rope_theta_of
from titanflow.hf_folder import INDEX, read_headers
from titanflow.results import StructureReport

#: torch dtype names (export_dtype) -> safetensors header dtype codes.
HEADER_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
_FLOAT_CODES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


def _config_problems(config: dict, shapes: dict[str, list[int]], expected_rope_theta: float | None) -> list[str]:
    problems = []
    tied, has_head = bool(config.get("tie_word_embeddings")), "lm_head.weight" in shapes
    if tied and has_head:
        problems.append("config.json says tie_word_embeddings but the files carry lm_head.weight")
    if not tied and not has_head:
        problems.append("config.json says untied embeddings but the files lack lm_head.weight "
                        "(transformers would initialise a random head)")
    layers = {int(m.group(1)) for k in shapes if (m := re.match(r"model\.layers\.(\d+)\.", k))}
    embed = shapes.get("model.embed_tokens.weight")
    head_dim = config.get("head_dim")
    expected = {
        "num_hidden_layers": len(layers),
        "vocab_size": embed[0] if embed else None,
        "hidden_size": embed[1] if embed else None,
        "head_dim": (shapes.get("model.layers.0.self_attn.q_norm.weight") or [None])[0],
        "num_attention_heads": (shapes.get("model.layers.0.self_attn.q_proj.weight", [0])[0] // head_dim
                                if head_dim else None),
        "num_key_value_heads": (shapes.get("model.layers.0.self_attn.k_proj.weight", [0])[0] // head_dim
                                if head_dim else None),
    }
    for field, from_weights in expected.items():
        if from_weights is not None and config.get(field) != from_weights:
            problems.append(f"config.json {field} is {config.get(field)} but the weights say {from_weights}")
    if expected_rope_theta is not None and rope_theta_of(config) != expected_rope_theta:
        problems.append(f"config.json rope_theta is {rope_theta_of(config)} but the model was trained "
                        f"with {expected_rope_theta}")
    return problems


def check_structure(export_dir: Path, export_dtype: str, expected_rope_theta: float | None) -> StructureReport:
    """Check index coverage, dtypes and config.json of ``export_dir`` (module docstring).

    Raises:
        ValueError: a shard cannot be read (see :func:`read_headers`).
    """
    problems = []
    headers = read_headers(export_dir)
    located = Counter(name for tensors in headers.values() for name in tensors)
    shapes = {name: shape for tensors in headers.values() for name, (_, shape) in tensors.items()}
    dtypes = Counter(dtype for tensors in headers.values() for dtype, _ in tensors.values())
    index_path = export_dir / INDEX
    if not index_path.is_file():
        problems.append(f"{INDEX} is missing")
    else:
        weight_map = json.loads(index_path.read_text()).get("weight_map", {})
        for name, shard in weight_map.items():
            if shard not in headers:
                problems.append(f"index names {shard} for {name}, which is not in the folder")
            elif name not in headers[shard]:
                problems.append(f"index puts {name} in {shard}, whose header lacks it")
        unindexed = sorted(set(located) - set(weight_map))
        if unindexed:
            problems.append(f"tensors missing from the index: {unindexed[:5]}")
    duplicated = sorted(name for name, count in located.items() if count > 1)
    if duplicated:
        problems.append(f"tensors stored in more than one shard: {duplicated[:5]}")
    want = HEADER_DTYPE[export_dtype]
    wrong = sorted({dtype for dtype in dtypes if dtype in _FLOAT_CODES and dtype != want})
    if wrong:
        problems.append(f"floating tensors in {wrong}, export dtype is {export_dtype} ({want})")
    config_path = export_dir / "config.json"
    if not config_path.is_file():
        problems.append("config.json is missing")
    else:
        problems += _config_problems(json.loads(config_path.read_text()), shapes, expected_rope_theta)
    return StructureReport(tensors=len(located), shards=len(headers), dtypes=dict(dtypes), problems=problems)
