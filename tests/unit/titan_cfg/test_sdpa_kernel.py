"""titan_cfg.sdpa_kernel: which aten kernel torch's scaled_dot_product_attention takes, read from what it dispatches."""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from titan_cfg.sdpa_kernel import KERNELS, UNFUSED, probe


def test_on_cpu_a_causal_call_takes_cpus_flash_attention():
    found = probe("cpu", heads=4, seq_len=64, head_dim=32, dtype=torch.float32)
    assert found["kernel"] == "_scaled_dot_product_flash_attention_for_cpu" and found["fused"] is True
    assert found["operators"][:2] == ["scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu"]
    assert (found["shape"], found["dtype"], found["device"]) == ([1, 4, 64, 32], "float32", "cpu")
    assert found["what"] == KERNELS["_scaled_dot_product_flash_attention_for_cpu"]


def test_a_call_no_fused_kernel_takes_is_the_unfused_math():
    # torch's own switch to the math backend stands for a device whose fused kernel refuses the call
    with sdpa_kernel(SDPBackend.MATH):
        found = probe("cpu", heads=2, seq_len=16, head_dim=8, dtype=torch.bfloat16)
    assert found["kernel"] == UNFUSED == "_scaled_dot_product_attention_math" and found["fused"] is False
    assert found["dtype"] == "bfloat16"


def test_a_device_that_cannot_run_the_call_is_recorded_not_raised():
    found = probe("cuda:0", heads=2, seq_len=16, head_dim=8, dtype=torch.float32)  # a CPU-only torch here
    assert "kernel" not in found and found["device"] == "cuda:0"
    assert "CUDA" in found["error"] or "cuda" in found["error"], found
