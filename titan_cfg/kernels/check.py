"""Check rope implementations against torchtitan's own on random inputs.

    python -m titan_cfg.kernels.check            # every rope implementation available here

Prints, per implementation and dtype, the relative error of the forward outputs and of
the input gradients against ``rope=reference`` (torchtitan's CosSinRoPE math). On a
Neuron node this is the first thing to run for ``rope=neuron`` (on device "neuron").
Shapes are asymmetric (batch, seq, heads, kv heads, head_dim all different) so a wrong
layout or a mis-broadcast cos/sin cannot pass by coincidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from titan_cfg import kernels
from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.kernels.layout import call_in_layout


#: (batch, seq, n_heads, n_kv_heads, head_dim): pairwise different, GQA 5:1. seq 256 meets the
#: Neuron kernel's 128 x LNC=2 multiple.
SHAPE = (3, 256, 5, 1, 24)


@dataclass(frozen=True)
class RopeCheck:
    """max |candidate - reference| / max |reference| for the rotated q and k (``forward``) and for
    the gradients of q and k under a fixed random upstream gradient (``backward``)."""

    forward: float
    backward: float


def cos_sin(batch: int, seq: int, head_dim: int, theta: float = 1e6):
    """Per-batch positions (a document boundary in batch 0), cos/sin [batch, seq, 1, head_dim] float32."""
    positions = torch.arange(seq).repeat(batch, 1)
    positions[0, seq // 3:] -= seq // 3  # a second document starts a third of the way in
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = positions[..., None].float() * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, :, None, :]
    return angles.cos(), angles.sin()


def _rel(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    return ((candidate.float() - reference.float()).abs().max() / reference.float().abs().max()).item()


def torchtitan_rope():
    """torchtitan's own rotation (``rope=reference``), imported on first use."""
    make_importable_without_triton()  # import-only: torchtitan's EP kernels module wants triton
    from titan_cfg.kernels.rope import reference_rope  # order: make_importable_without_triton() first

    return reference_rope


def check_rope(kernel, layout: str, *, dtype=torch.float32, device="cpu", shape=SHAPE, seed: int = 0,
               reference=None) -> RopeCheck:
    """Compare ``kernel`` (called through the layout adapter in ``layout``) with ``reference``
    (BLNH; default torchtitan's, :func:`torchtitan_rope`).

    ``kernel(q, k, cos, sin) -> (q_out, k_out)`` in ``layout``; inputs of ``dtype`` on ``device``.
    """
    reference = reference or torchtitan_rope()
    batch, seq, heads, kv_heads, head_dim = shape
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq, heads, head_dim, generator=generator).to(device, dtype)
    k = torch.randn(batch, seq, kv_heads, head_dim, generator=generator).to(device, dtype)
    grads = [torch.randn(t.shape, generator=generator).to(device, dtype) for t in (q, k)]
    cos, sin = (t.to(device) for t in cos_sin(batch, seq, head_dim))
    results = []
    for fn in (reference, lambda *a: call_in_layout(kernel, layout, *a)):
        q_in, k_in = q.clone().requires_grad_(), k.clone().requires_grad_()
        outs = fn(q_in, k_in, cos, sin)
        torch.autograd.backward(outs, grads)
        results.append((outs, (q_in.grad, k_in.grad)))
    (ref_out, ref_grad), (out, grad) = results
    return RopeCheck(forward=max(_rel(a, b) for a, b in zip(out, ref_out)),
                     backward=max(_rel(a, b) for a, b in zip(grad, ref_grad)))


def main() -> None:
    """Print the check for every rope implementation that can run here, fp32 and bf16."""
    device_of = {"neuron": "neuron", "cuda": "cuda"}
    print(f"{'implementation':<16}{'dtype':<10}{'forward rel err':>18}{'backward rel err':>18}")
    for name, impl in kernels.OPS["rope"].implementations.items():
        if name == "reference" or impl.unavailable():
            print(f"{name:<16}{'-':<10}{'skipped: ' + (impl.unavailable() or 'is the reference'):>36}")
            continue
        for dtype in (torch.float32, torch.bfloat16):
            result = check_rope(impl.load(), impl.layout, dtype=dtype, device=device_of.get(name, "cpu"))
            print(f"{name:<16}{str(dtype).removeprefix('torch.'):<10}{result.forward:>18.3g}{result.backward:>18.3g}")


if __name__ == "__main__":
    main()
