"""``rope=neuron``: nki-library's ``rope_hf`` kernel on Trainium, registered through torch-neuronx.

The kernel is ``nkilib.core.embeddings.rope_hf`` (HF layout [batch, heads, seq, head_dim]; nki-library's
API page names ``nkilib.core.rope``, a module the library does not have). It is registered the way the
Neuron 2.33 documentation describes ("How to work with NKI kernels from torch-neuronx"):
``torch_neuronx.nki_op`` turns a function that allocates the outputs and launches the kernel through
``torch_neuronx.wrap_nki`` into a PyTorch custom operator (eager mode, ``torch.compile`` with
``backend="neuron"``, training), and ``register_autograd`` gives it a backward that launches the
kernel's own backward mode. The registry's layout adapter (:mod:`titan_cfg.kernels.layout`) hands the
op torchtitan's [B, L, N, H] tensors permuted to [B, N, L, H] and permutes the results back, so the
op has the contract of the cpu one (:mod:`titan_cfg.kernels.rope_cpu`): q [B, N, L, H], k
[B, N_kv, L, H], cos/sin [1 or B, 1, L, H] in; new tensors out; inputs never mutated.

Kernel facts (nki-library, ``nkilib/core/embeddings/rope_hf.py``): ``rope_hf(q, k, q_out, k_out,
cos, sin, rope_cache=None, backward=False)`` writes into ``q_out``/``k_out``; cos/sin are
[seq, head_dim] or [batch, seq, head_dim]; it reads its operands from HBM as contiguous memory, so
every operand is made contiguous here (a permuted view, or a gradient that reaches the backward
strided after a ``torch.cat`` or transpose, would otherwise be read scrambled); it computes in the
input dtype (bf16), while torchtitan's CosSinRoPE upcasts to fp32, so bf16 results differ by
rounding; the sequence length must be a multiple of 128 x the LNC degree (256 at LNC=2), checked at
config time (``ScenarioRun``) and again here before each launch. The LNC degree is the launch grid
(``wrap_nki(rope_hf)[(lnc,)]``) and comes from ``NEURON_LOGICAL_NC_CONFIG``, which the trn2 target
sets and which must match the compiler's (a mismatch is neuronx-cc error NCC_EVRF066).

Tested here (tests/unit/titan_cfg/test_rope_neuron.py) with stand-ins of torch-neuronx, nki and
nkilib that keep these signatures and compute in plain torch on cpu tensors: forward and backward
through the registered op equal ``rope=reference`` in fp32, the grid reaches the kernel, seq_len is
checked, non-contiguous gradients give the same result. Still to check on a Neuron node (nothing
here can run it):

- that the installed nkilib's ``rope_hf`` imports from ``nkilib.core.embeddings.rope_hf`` and keeps
  the signature above;
- ``wrap_nki`` with a 1-tuple grid ``[(lnc,)]`` launching on ``lnc`` cores (the bracket form is
  being deprecated in favour of the LNC degree from the environment; a grid equal to the LNC degree
  stays accepted, Neuron 2.31 announcement);
- that ``wrap_nki`` handles a kernel writing into output buffers passed as arguments (``q_out``,
  ``k_out``) without ``nt.mutable_tensor`` annotations, in eager mode and under ``torch.compile``;
- the kernel's DMA of fp32 cos/sin into bf16 tiles: they are cast to the input dtype here first;
- ``python -m titan_cfg.kernels.check`` on device "neuron": forward and backward against
  ``rope=reference`` within the bf16 tolerance of tests/unit/titan_cfg/test_kernels.py;
- ``torch.library.opcheck`` of the two ops on neuron tensors, and one compiled moe training step
  with ``backend="neuron"``.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from titan_cfg import kernels

try:
    from nkilib.core.embeddings.rope_hf import rope_hf as nki_rope_hf
    from torch_neuronx import nki_op, wrap_nki
except ImportError as err:  # the registry reports why first (kernels.Implementation.unavailable)
    raise ImportError(f"rope=neuron needs torch-neuronx, nki and nkilib (a Neuron node): {err}") from err

#: The kernel as torch-neuronx wraps it, so torch.compile captures the launch into its graph.
KERNEL = wrap_nki(nki_rope_hf)

#: The environment variable that sets the logical-NeuronCore degree of the runtime (and of NKI launches).
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"


def lnc() -> int:
    """The logical-NeuronCore degree of this process, from ``NEURON_LOGICAL_NC_CONFIG`` (1 or 2).

    Raises:
        RuntimeError: the variable is unset or not 1 or 2 (the kernel's shards must match the
            compiler's LNC, which defaults to 2 on trn2 while a kernel launched without it gets 1).
    """
    value = os.environ.get(LNC_ENV)
    if value not in ("1", "2"):
        raise RuntimeError(f"rope=neuron: {LNC_ENV} is {value!r}; set it to the node's logical-NeuronCore degree "
                           "(the trn2 target sets 2)")
    return int(value)


def kernel_cos_sin(cos_B1LH: Tensor, batch: int, dtype: torch.dtype) -> Tensor:
    """The registry's cos or sin [1 or B, 1, L, H] as the kernel takes it: [L, H] when shared by the
    batch, [B, L, H] when per batch row (per-document positions); contiguous, in ``dtype``."""
    cos_BLH = cos_B1LH.squeeze(1)
    if cos_BLH.shape[0] == 1 and batch != 1:
        cos_BLH = cos_BLH[0]
    return cos_BLH.to(dtype).contiguous()


def _launch(q_BNLH: Tensor, k_BNLH: Tensor, cos_B1LH: Tensor, sin_B1LH: Tensor, backward: bool):
    degree = lnc()
    kernels.implementation("rope", "neuron").check_shape(q_BNLH.shape[2], degree)  # KernelChoiceError names the fix
    q_in, k_in = q_BNLH.contiguous(), k_BNLH.contiguous()
    q_out, k_out = torch.empty_like(q_in), torch.empty_like(k_in)
    batch = q_in.shape[0]
    # the tensors the launch returns: nkilib's kernel returns the outputs it wrote, and how torch-neuronx's wrapped
    # launch hands them back (the buffers given, or its own) has not been seen on a device; these are right either way
    q_rot, k_rot = KERNEL[(degree,)](q_in, k_in, q_out, k_out, cos=kernel_cos_sin(cos_B1LH, batch, q_in.dtype),
                                     sin=kernel_cos_sin(sin_B1LH, batch, q_in.dtype), backward=backward)
    return q_rot, k_rot


@nki_op("titanflow::rope_hf_neuron", mutates_args={})
def rope_hf(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate ``q`` [B, N, L, H] and ``k`` [B, N_kv, L, H] by ``cos``/``sin`` [1 or B, 1, L, H] with nkilib's
    ``rope_hf``; returns new contiguous tensors in the inputs' dtype.

    Raises:
        titan_cfg.kernels.KernelChoiceError: L is not a multiple of 128 x LNC.
        RuntimeError: ``NEURON_LOGICAL_NC_CONFIG`` is not set to 1 or 2.
    """
    return _launch(q, k, cos, sin, backward=False)


@nki_op("titanflow::rope_hf_neuron_backward", mutates_args={})
def rope_hf_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Vector-Jacobian product of :func:`rope_hf` by the kernel's backward mode (the rotation by -theta);
    the gradients may arrive in any strides."""
    return _launch(grad_q, grad_k, cos, sin, backward=True)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[2], inputs[3])


def _backward(ctx, grad_q: Tensor, grad_k: Tensor):
    cos, sin = ctx.saved_tensors
    return (*rope_hf_backward(grad_q, grad_k, cos, sin), None, None)  # cos/sin: the RoPE cache, no gradient


rope_hf.register_autograd(_backward, setup_context=_setup_context)
