"""``rope=neuron``: nkilib's ``rope_hf`` kernel on Trainium, registered with torch-neuronx.

Runs only where torch-neuronx, nki and nkilib are installed (a Neuron node); the
registry reports it unavailable elsewhere, and importing this module without
torch-neuronx raises ImportError naming the package. The op has the same contract
as the cpu one (:mod:`titan_cfg.kernels.rope_cpu`): HF layout [B, N, L, H] in,
new tensors out, inputs never mutated, backward by the kernel's own backward mode.

Kernel facts (nkilib RoPE docs; docs/measurements.md): ``rope_hf(q, k, q_out, k_out, cos, sin,
backward=...)`` writes into ``q_out``/``k_out``; it computes in the input dtype (bf16),
while torchtitan's CosSinRoPE upcasts to fp32, so expect bf16 rounding differences,
not equality; the sequence length must be a multiple of 128 x LNC (256 at LNC=2). The
LNC degree is given at the call site (``kernel[lnc](...)``) and must match
``NEURON_LOGICAL_NC_CONFIG``.

To check on a node (nothing here could run it): the import path of ``rope_hf`` in the
installed nkilib; the cos/sin shape it takes ([B, L, H] here, squeezed from the
broadcast form); that ``torch.library.opcheck`` passes on neuron tensors; forward and
backward against ``rope=reference`` within bf16 tolerance (tests/unit/titan_cfg/test_kernels.py runs
there unskipped); a compiled step with ``backend="neuron"``.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from titan_cfg import kernels

try:
    import torch_neuronx  # noqa: F401  (registers the "neuron" device)
    from nkilib.core.rope import rope_hf as _nki_rope_hf
except ImportError as err:  # pragma: no cover - exercised on Neuron nodes only
    raise ImportError(f"rope=neuron needs torch-neuronx, nki and nkilib (a Neuron node): {err}") from err

def lnc() -> int:
    """The logical-NeuronCore degree of this process (``NEURON_LOGICAL_NC_CONFIG``, default 1)."""
    return int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1"))


def _run(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, backward: bool) -> tuple[Tensor, Tensor]:
    kernels.implementation("rope", "neuron").check_shape(q.shape[2], lnc())  # also checked at config time
    q_out, k_out = torch.empty_like(q, memory_format=torch.contiguous_format), torch.empty_like(
        k, memory_format=torch.contiguous_format)
    cos_BLH, sin_BLH = (t.squeeze(1).expand(q.shape[0], -1, -1).to(q.dtype).contiguous() for t in (cos, sin))
    _nki_rope_hf[lnc()](q.contiguous(), k.contiguous(), q_out, k_out, cos_BLH, sin_BLH, backward=backward)
    return q_out, k_out


@torch.library.custom_op("titanflow::rope_hf_neuron", mutates_args=(), device_types="neuron")
def rope_hf(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate ``q`` [B, N, L, H] and ``k`` [B, N_kv, L, H] by ``cos``/``sin`` [1 or B, 1, L, H] with nkilib."""
    return _run(q, k, cos, sin, backward=False)


@torch.library.custom_op("titanflow::rope_hf_neuron_backward", mutates_args=(), device_types="neuron")
def rope_hf_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Vector-Jacobian product of :func:`rope_hf` by the kernel's backward mode."""
    return _run(grad_q, grad_k, cos, sin, backward=True)


@rope_hf.register_fake
def _(q, k, cos, sin):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@rope_hf_backward.register_fake
def _(grad_q, grad_k, cos, sin):
    return grad_q.new_empty(grad_q.shape), grad_k.new_empty(grad_k.shape)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[2], inputs[3])


def _backward(ctx, grad_q: Tensor, grad_k: Tensor):
    cos, sin = ctx.saved_tensors
    return (*rope_hf_backward(grad_q, grad_k, cos, sin), None, None)


rope_hf.register_autograd(_backward, setup_context=_setup_context)
