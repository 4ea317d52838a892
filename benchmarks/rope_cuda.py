"""``rope=cuda`` on a CUDA machine: correctness against the torch op, then speed, in one table each.

    python benchmarks/rope_cuda.py

Needs torch with CUDA and triton; torchtitan is not needed. The reference here is the
``rope=cpu`` custom op (plain torch, so it also runs on CUDA tensors), which
tests/unit/titan_cfg/test_kernels.py checks bit-exact against torchtitan's CosSinRoPE; agreement with
it is agreement with torchtitan. Timings are ``torch.utils.benchmark`` medians of
forward + backward, the torch op and the Triton kernel side by side in one run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from titan_cfg.kernels.check import SHAPE, cos_sin, check_rope  # noqa: E402
from titan_cfg.kernels.layout import call_in_layout  # noqa: E402
from titan_cfg.kernels.rope_cpu import rope_hf as torch_rope  # noqa: E402
from titan_cfg.kernels.rope_cuda import rope_hf as triton_rope  # noqa: E402

#: name -> (batch, seq, heads, kv heads, head_dim): the check's asymmetric shape, and Qwen3-30B-A3B's
#: attention (32 / 4 heads of 128) at one and eight sequences of 4096 tokens.
SHAPES = {"asymmetric": SHAPE, "30B-A3B x1": (1, 4096, 32, 4, 128), "30B-A3B x8": (8, 4096, 32, 4, 128)}


def _reference(*tensors_BLNH):
    return call_in_layout(torch_rope, "BNLH", *tensors_BLNH)


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"\n{'shape':<14}{'dtype':<10}{'forward rel err':>17}{'backward rel err':>18}")
    for name, shape in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            result = check_rope(triton_rope, "BNLH", dtype=dtype, device="cuda", shape=shape, reference=_reference)
            print(f"{name:<14}{str(dtype).removeprefix('torch.'):<10}{result.forward:>17.3g}{result.backward:>18.3g}")
    q = torch.randn(2, 3, 64, 16, device="cuda", requires_grad=True)
    k = torch.randn(2, 1, 64, 16, device="cuda", requires_grad=True)
    cos, sin = (t.permute(0, 2, 1, 3).cuda() for t in cos_sin(2, 64, 16))
    torch.library.opcheck(triton_rope, (q, k, cos, sin))
    print("\ntorch.library.opcheck(titanflow::rope_hf_cuda): passed")

    print(f"\n{'shape':<14}{'dtype':<10}{'torch op ms':>13}{'triton ms':>11}{'speed-up':>10}")
    for name, (batch, seq, heads, kv_heads, head_dim) in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=dtype, requires_grad=True)
            k = torch.randn(batch, seq, kv_heads, head_dim, device="cuda", dtype=dtype, requires_grad=True)
            cos, sin = (t.cuda() for t in cos_sin(batch, seq, head_dim))
            grads = [torch.ones_like(q), torch.ones_like(k)]
            ms = []
            for kernel in (torch_rope, triton_rope):
                timer = benchmark.Timer(
                    "torch.autograd.backward(call_in_layout(kernel, 'BNLH', q, k, cos, sin), grads)",
                    globals={"torch": torch, "call_in_layout": call_in_layout, "kernel": kernel, "q": q, "k": k,
                             "cos": cos, "sin": sin, "grads": grads})
                ms.append(timer.blocked_autorange(min_run_time=0.5).median * 1e3)
            print(f"{name:<14}{str(dtype).removeprefix('torch.'):<10}{ms[0]:>13.3f}{ms[1]:>11.3f}{ms[0] / ms[1]:>9.2f}x")


if __name__ == "__main__":
    main()
