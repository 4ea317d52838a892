"""Round trip HF -> torchtitan -> HF with zero training steps, for torchtitan's native Qwen3.

The export is read with torchtitan's own state-dict adapter into a torchtitan
model built from the checkpoint's config.json (fused q/k/v and all), then
written back with the same adapter. Every tensor must come back bit for bit
(compared in the export's dtype), with no key gained or lost: a conversion that
drops, renames, reshapes or reorders anything fails here without any training noise.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from titan_cfg.model_spec import Qwen3Shape


class RoundTripReport(BaseModel):
    """Tensors compared, and the keys that did not come back identical, went missing or appeared."""

    tensors: int
    differing: list[str]
    lost: list[str]
    gained: list[str]


def check_round_trip(export_dir: Path, shape: Qwen3Shape) -> RoundTripReport:
    """HF (``export_dir``) -> torchtitan Qwen3 (spec built from ``shape``, the job's) -> HF."""
    from titan_cfg.compat.cpu import make_importable_without_triton

    make_importable_without_triton()  # import-only: torchtitan's EP kernels module wants triton
    import torch
    from safetensors.torch import load_file

    from titan_cfg.model_spec import torchtitan_model_spec

    spec = torchtitan_model_spec(shape, flavor="round-trip", max_seq_len=shape.max_position_embeddings)
    with torch.device("meta"):
        model = spec.model.build()
    model = model.to_empty(device="cpu")
    hf_state = {}
    for shard in sorted(export_dir.glob("*.safetensors")):
        hf_state.update(load_file(shard))
    adapter = spec.state_dict_adapter(spec.model, str(export_dir))
    model.load_state_dict(adapter.from_hf(dict(hf_state)), strict=False)  # from_hf adds keys in place
    back = adapter.to_hf({k: v.detach() for k, v in model.state_dict().items()})
    differing = sorted(k for k in set(hf_state) & set(back)
                       if not torch.equal(back[k].to(hf_state[k].dtype), hf_state[k]))
    return RoundTripReport(tensors=len(hf_state), differing=differing,
                           lost=sorted(set(hf_state) - set(back)), gained=sorted(set(back) - set(hf_state)))
