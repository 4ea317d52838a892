"""Which kernel torch's ``scaled_dot_product_attention`` takes on a rank's device, read from the aten operators it
dispatches to.

``torch.nn.functional.scaled_dot_product_attention`` is a composite operator: torch picks a backend per call
(device, dtype, shape, mask) and dispatches to that backend's aten operator. A device plugged in out of tree, as
torch-neuronx's ``neuron`` device is (PrivateUse1), supplies its fused kernel as
``aten::_scaled_dot_product_fused_attention_overrideable``; a call that no fused kernel takes goes to
``aten::_scaled_dot_product_attention_math`` (matmuls and a softmax). Which one a rank got is what a Trainium run's
speed and numerics hang on, and nothing in torchtitan's output says it, so rank 0 records it on every run
(titan_cfg.window.record_install: ``train/torchtitan_install.json``, key ``sdpa``).

The operators are read from torch's profiler (its CPU activity records every operator the dispatcher enters, on any
device) over one causal call of the run's own attention shape ``[1, heads, seq_len, head_dim]`` in its training
dtype: no model, no process group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

#: aten operator -> what it is. The fused ones are each backend's own kernel; ``math`` is the unfused reference.
KERNELS: dict[str, str] = {
    "_scaled_dot_product_fused_attention_overrideable": "the device backend's own fused kernel (an out-of-tree "
                                                        "device's override: torch-neuronx on neuron)",
    "_scaled_dot_product_flash_attention": "flash attention (CUDA)",
    "_scaled_dot_product_efficient_attention": "memory-efficient attention (CUDA)",
    "_scaled_dot_product_cudnn_attention": "cuDNN attention (CUDA)",
    "_scaled_dot_product_flash_attention_for_cpu": "flash attention for CPU",
    "_scaled_dot_product_attention_math": "the unfused math reference (matmuls and a softmax)",
}
#: The one entry of :data:`KERNELS` that is not a fused kernel.
UNFUSED = "_scaled_dot_product_attention_math"


def probe(device: str | torch.device, heads: int, seq_len: int, head_dim: int, dtype: torch.dtype) -> dict:
    """One causal ``scaled_dot_product_attention`` of ``[1, heads, seq_len, head_dim]`` in ``dtype`` on ``device``;
    returns ``{"kernel": the aten operator of :data:`KERNELS` it took (None when none of them), "what": its words,
    "fused": whether a fused kernel took it (None when unknown), "operators": every aten operator dispatched, "shape",
    "dtype", "device"}``. A device that cannot run the call gives ``{"error": ...}`` instead of raising: the record
    says why, and training goes on.
    """
    shape = [1, heads, seq_len, head_dim]
    asked = {"device": str(device), "shape": shape, "dtype": str(dtype).removeprefix("torch.")}
    try:
        q, k, v = (torch.randn(shape, dtype=dtype, device=device) for _ in range(3))
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as seen:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception as err:  # noqa: BLE001  (whatever the device raises: the record says it, the training goes on)
        return {**asked, "error": f"{type(err).__name__}: {err}"[:500]}
    operators = [event.name.removeprefix("aten::") for event in seen.events()]
    kernel = next((name for name in operators if name in KERNELS), None)
    return {**asked, "kernel": kernel, "what": KERNELS.get(kernel, "not a kernel titanflow knows: see operators"),
            "fused": None if kernel is None else kernel != UNFUSED, "operators": operators}
