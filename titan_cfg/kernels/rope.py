"""The ``rope`` op: torchtitan's CosSinRoPE with its rotation done by a registered kernel.

:class:`KernelRoPE` subclasses torchtitan's ``CosSinRoPE`` and keeps everything of it
(cache, positions, per-document gather) except the rotation, which it hands to the
chosen implementation through the layout adapter. :func:`install` swaps its config
into every attention layer of a torchtitan decoder config; ``reference`` leaves
torchtitan's own module in place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torchtitan.models.common.rope import CosSinRoPE

from titan_cfg import kernels
from titan_cfg.kernels.layout import call_in_layout


def reference_rope(q_BLNH: torch.Tensor, k_BLNH: torch.Tensor, cos_BL1H: torch.Tensor, sin_BL1H: torch.Tensor):
    """torchtitan's own rotation (``CosSinRoPE.apply_rotary_emb``, fp32 math, output in the input dtype).

    Shapes as in :func:`titan_cfg.kernels.layout.call_in_layout`; returns (q, k) rotated, BLNH.
    """
    return CosSinRoPE.apply_rotary_emb(q_BLNH, k_BLNH, torch.cat([cos_BL1H, sin_BL1H], dim=-1))


class KernelRoPE(CosSinRoPE):
    """CosSinRoPE whose rotation runs in the registered ``rope`` implementation ``config.implementation``.

    ``forward(query [B, L, N, H], key [B, L, N_kv, H], positions [B or 1, L] | None)`` returns the
    rotated (query, key) in the same shapes and dtypes (token-major [T, N, H] and [T] from 2026-08-20 too).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(CosSinRoPE.Config):
        """CosSinRoPE's fields plus the implementation name (a key of the registry's rope op)."""

        implementation: str = "reference"

    def __init__(self, config: Config):
        super().__init__(config)
        self._kernel, self._layout = kernels.loaded("rope", config.implementation)

    def forward(self, query: torch.Tensor, key: torch.Tensor, positions: torch.Tensor | None = None):
        """Rotate ``query`` and ``key`` by the cached cos/sin at ``positions`` (see class docstring). A token-major
        microbatch (``query`` [T, N, H], ``positions`` [T]: a base from 2026-08-20, titan_cfg.token_rows) is rotated
        as one row of T tokens, each at its own position; the same shapes come back."""
        cache_BL1C = self._reshape_cache(query, positions)  # C = 2 * head_dim: [cos | sin]; token-major: [T, 1, C]
        head_dim = query.shape[-1]
        cos, sin = cache_BL1C[..., :head_dim], cache_BL1C[..., head_dim:]
        if query.dim() == 3:
            q, k = call_in_layout(self._kernel, self._layout, query[None], key[None], cos[None], sin[None])
            return q[0], k[0]
        return call_in_layout(self._kernel, self._layout, query, key, cos, sin)


def install(trainer_config, implementation: str) -> None:
    """Put :class:`KernelRoPE` with ``implementation`` in every layer of a torchtitan decoder config;
    ``reference`` keeps torchtitan's CosSinRoPE.

    Raises:
        kernels.KernelChoiceError: the model is not a torchtitan decoder with CosSinRoPE (the
            transformers backend computes RoPE inside transformers).
    """
    if implementation == "reference":
        return
    model_config = trainer_config.model_spec.model
    layers = getattr(model_config, "layers", None)
    if not layers or not all(isinstance(layer.attention.rope, CosSinRoPE.Config) for layer in layers):
        raise kernels.KernelChoiceError(
            f"kernels: rope={implementation} needs torchtitan's own decoder with CosSinRoPE; this model "
            "computes RoPE elsewhere (the transformers backend does it inside transformers); fix: pass rope=reference")
    for layer in layers:
        fields = {f.name: getattr(layer.attention.rope, f.name) for f in dataclasses.fields(CosSinRoPE.Config)}
        layer.attention.rope = KernelRoPE.Config(**fields, implementation=implementation)
