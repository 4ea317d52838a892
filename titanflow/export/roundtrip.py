"""Round trip HF -> torchtitan -> HF with zero training steps, for torchtitan's native Qwen3.

The export is read with torchtitan's own state-dict adapter into the state of a torchtitan
model built from the job's shape (fused q/k/v and all), then written back with the same
adapter. Every tensor must come back bit for bit (compared in the export's dtype), with no
key gained or lost: a conversion that drops, renames, reshapes or reorders anything fails
here without any training noise.

Memory: one group of tensors at a time (a decoder layer's, or the rest: embedding, final
norm, head), read from the safetensors shards that hold it and released before the next.
The adapter converts each key on its own except a layer's experts, which it stacks per
layer, so a layer is the smallest group it can convert. The torchtitan model is built on
the meta device only: its state dict gives the names, shapes and dtypes the converted
tensors must load into, without storage. This is what ``model.load_state_dict(..., strict=False)``
followed by ``adapter.to_hf(model.state_dict())`` did on a materialised model:

- a converted tensor whose name the model lacks is dropped (its HF key is then lost);
- a converted tensor of another shape than the model's raises (load_state_dict's size mismatch);
- a converted tensor is stored in the model's dtype before it goes back;
- a model tensor nothing was converted into goes back too: its HF key is gained when the export
  lacks it, else it differs (it would hold uninitialised memory).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from titan_cfg.model_spec import Qwen3Shape, torchtitan_model_spec
from titanflow.hf_folder import read_headers
from titanflow.results import RoundTripReport

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def conversion_groups(names) -> list[list[str]]:
    """HF tensor names grouped the way torchtitan's adapter can convert them apart: one group per
    decoder layer (``model.layers.<i>.``, ascending i), then every other name; names sorted in a group."""
    groups: dict[int, list[str]] = defaultdict(list)
    for name in names:
        layer = _LAYER.match(name)
        groups[int(layer.group(1)) if layer else -1].append(name)
    return [sorted(groups[key]) for key in sorted(groups, key=lambda k: (k < 0, k))]


def _read_group(export_dir: Path, names: list[str], shard_of: dict[str, str]) -> dict:
    """{name: tensor} of ``names``, each shard opened once and closed (unmapped) before returning."""
    from safetensors import safe_open

    by_shard: dict[str, list[str]] = defaultdict(list)
    for name in names:
        by_shard[shard_of[name]].append(name)
    tensors = {}
    for shard, in_shard in sorted(by_shard.items()):
        with safe_open(export_dir / shard, "pt") as f:
            tensors.update({name: f.get_tensor(name) for name in in_shard})
    return tensors


def check_round_trip(export_dir: Path, shape: Qwen3Shape) -> RoundTripReport:
    """HF (``export_dir``) -> torchtitan Qwen3 (spec built from ``shape``, the job's) -> HF, group by group
    (module docstring); peak memory is about two copies of the largest group, not of the model.

    Raises:
        ValueError: a shard cannot be read (titanflow.hf_folder.read_headers), or the adapter converts
            a tensor to another shape than the torchtitan model's (naming the key and both shapes).
    """
    from titan_cfg.compat.cpu import make_importable_without_triton  # lazy: torch

    make_importable_without_triton()  # import-only: torchtitan's EP kernels module wants triton
    import torch

    spec = torchtitan_model_spec(shape, flavor="round-trip", max_seq_len=shape.max_position_embeddings)
    with torch.device("meta"):
        expected = spec.model.build().state_dict()  # names, shapes, dtypes; no storage
    adapter = spec.state_dict_adapter(spec.model, str(export_dir))
    tied = bool(getattr(adapter.model_config, "enable_weight_tying", False))
    shard_of = {name: shard for shard, tensors in read_headers(export_dir).items() for name in tensors}
    embedding = "model.embed_tokens.weight"
    loaded: set[str] = set()
    returned: set[str] = set()
    differing: list[str] = []
    for names in conversion_groups(shard_of):
        hf = _read_group(export_dir, names, shard_of)
        given = dict(hf)
        stand_in = tied and embedding not in given and "lm_head.weight" not in given
        if stand_in:  # torchtitan's from_hf asserts the embedding is in every call of a tied model (it copies
            given[embedding] = torch.empty(0, device="meta")  # it to lm_head); what it makes of it is dropped
        titan = adapter.from_hf(given)
        if stand_in:
            titan = {k: v for k, v in titan.items() if v.device.type != "meta"}
        state = {}
        for key, value in titan.items():
            if key not in expected:
                continue  # load_state_dict(strict=False) ignores it: its HF key does not come back
            if value.shape != expected[key].shape:
                raise ValueError(f"round trip: torchtitan's from_hf gives {key} of shape {tuple(value.shape)}, the "
                                 f"torchtitan model built from the job's shape has {tuple(expected[key].shape)}")
            state[key] = value.to(expected[key].dtype)
        loaded |= state.keys()
        back = adapter.to_hf(state)
        returned |= back.keys()
        for key, value in back.items():
            if key not in shard_of:
                continue  # gained
            # a key of another group (a conversion that moves a tensor across layers) is read on its own
            original = hf[key] if key in hf else _read_group(export_dir, [key], shard_of)[key]
            if not torch.equal(value.to(original.dtype), original):
                differing.append(key)
        del hf, given, titan, state, back
    never_loaded = adapter.to_hf({k: v for k, v in expected.items() if k not in loaded})
    returned |= never_loaded.keys()
    differing += [k for k in never_loaded if k in shard_of]
    return RoundTripReport(tensors=len(shard_of), differing=sorted(set(differing)),
                           lost=sorted(set(shard_of) - returned), gained=sorted(returned - set(shard_of)))
