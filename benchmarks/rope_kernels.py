"""RoPE implementations side by side: the op alone, then whole moe training steps.

    .venv/bin/python benchmarks/rope_kernels.py            # op timings + 2 moe runs per implementation
    .venv/bin/python benchmarks/rope_kernels.py --op-only  # op timings only (seconds)

Part 1 times forward + backward of each rope implementation available here with
``torch.utils.benchmark`` (median of its adaptive repeats) on the tiny MoE's attention
shape and on the trimmed Qwen3-30B-A3B's (per rank on trn2: batch 1 x 4096 tokens,
32 / 4 heads of 128). Part 2 runs ``titanflow run moe --target cpu`` with each
implementation, alternating, and reads the per-step time from torchtitan's tokens/s
(per rank: local batch x seq_len / tps), skipping step 1 (warm-up). Ratios are to
``reference`` in the same invocation: these machines are shared and noisy, so only
ratios from one run are comparable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch
from torch.utils import benchmark

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titan_cfg import kernels  # noqa: E402
from titan_cfg.compat.cpu import make_importable_without_triton  # noqa: E402
from titan_cfg.kernels.layout import call_in_layout  # noqa: E402

make_importable_without_triton()
from titan_cfg.kernels.check import cos_sin  # noqa: E402
from titan_cfg.kernels.rope import reference_rope  # noqa: E402

#: name -> (batch, seq, heads, kv heads, head_dim)
SHAPES = {"tiny moe (cpu target)": (2, 256, 4, 2, 40), "30B-A3B per rank (trn2)": (1, 4096, 32, 4, 128)}


def _available_rope() -> dict:
    """Implementation name -> callable(q, k, cos, sin) in torchtitan's BLNH layout."""
    found = {"reference": reference_rope}
    for name, impl in kernels.OPS["rope"].implementations.items():
        if name != "reference" and impl.unavailable() is None and "cpu" in impl.runs_on:
            kernel = impl.load()
            found[name] = lambda *t, kernel=kernel, layout=impl.layout: call_in_layout(kernel, layout, *t)
    return found


def op_table() -> pd.DataFrame:
    """Median forward+backward milliseconds per implementation and shape, and the ratio to reference."""
    rows = []
    for shape_name, (batch, seq, heads, kv_heads, head_dim) in SHAPES.items():
        q = torch.randn(batch, seq, heads, head_dim, requires_grad=True)
        k = torch.randn(batch, seq, kv_heads, head_dim, requires_grad=True)
        cos, sin = cos_sin(batch, seq, head_dim)
        for name, fn in _available_rope().items():
            timer = benchmark.Timer("torch.autograd.backward(fn(q, k, cos, sin), grads)",
                                    globals={"fn": fn, "q": q, "k": k, "cos": cos, "sin": sin, "torch": torch,
                                             "grads": [torch.ones_like(q), torch.ones_like(k)]})
            rows.append({"shape": shape_name, "rope": name, "fwd+bwd ms": timer.blocked_autorange(min_run_time=1).median * 1e3})
    table = pd.DataFrame(rows)
    reference = table[table.rope == "reference"].set_index("shape")["fwd+bwd ms"]
    table["vs reference"] = table["fwd+bwd ms"] / table["shape"].map(reference)
    return table


def step_table(implementations: list[str], runs: int, steps: int) -> pd.DataFrame:
    """Median seconds per training step (steps >= 2) of ``titanflow run moe`` per implementation."""
    rows = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for repeat in range(runs):
            for name in implementations:
                out = Path(runs_dir) / f"{name}-{repeat}"
                subprocess.run([str(Path(sys.executable).parent / "titanflow"), "run", "moe", "--target", "cpu",
                                "--steps", str(steps), "--kernels", f"rope={name}", "--runs-dir", str(out)],
                               check=True, capture_output=True, text=True)
                (run_dir,) = list(out.iterdir())
                job = json.loads((run_dir / "job" / "job.json").read_text())
                metrics = pd.read_csv(run_dir / "metrics.csv")
                step_s = job["local_batch_size"] * job["seq_len"] / metrics[metrics.step >= 2]["tps"]
                summary = json.loads((run_dir / "summary.json").read_text())
                rows.append({"rope": name, "run": repeat, "s/step": step_s.median(),
                             "first-step loss": summary["first_step_loss"], "verdict": summary["verdict"]})
    table = pd.DataFrame(rows)
    median = table.groupby("rope")["s/step"].median()
    table["vs reference (median)"] = table["rope"].map(median / median["reference"])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op-only", action="store_true", help="skip the training runs")
    parser.add_argument("--runs", type=int, default=2, help="training runs per implementation (alternating)")
    parser.add_argument("--steps", type=int, default=6, help="steps per training run")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as each cpu-target rank runs (OMP_NUM_THREADS=1)
    print("RoPE op, forward + backward (torch.utils.benchmark median)")
    print(op_table().to_string(index=False, float_format="%.3f"))
    if not args.op_only:
        print(f"\nmoe on cpu, {args.steps} steps x {args.runs} runs per implementation (2 ranks)")
        names = [n for n in _available_rope()]
        print(step_table(names, args.runs, args.steps).to_string(index=False, float_format="%.4f"))


if __name__ == "__main__":
    main()
