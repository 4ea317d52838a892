"""What a run's loss should be, and where each figure comes from.

Random init (derived): with logits z_i ~ N(0, s^2) i.i.d. over a vocabulary of
V tokens, E[-log softmax(z)_target] = E[logsumexp z] - E[z_target]
~ ln V + s^2/2 (the lognormal mean: E[e^z] = e^{s^2/2}, so
logsumexp z ~ ln(V e^{s^2/2})), and E[z_target] = 0 at init. After the final
RMSNorm each hidden vector h has |h|^2 ~ d (the hidden size), so with an output
matrix of i.i.d. entries of variance v, s^2 = d v. The init decides v:
- torchtitan's Qwen3 (models/qwen3/__init__.py: lm_head normal std 0.02; tied
  embeddings skip their own init and share it) and transformers' Qwen3
  (initializer_range 0.02): v = 0.02^2;
- torchtitan's transformers backend (experiments/transformers_modeling_backend/
  model.py, lm_head): truncated normal, std d^-1/2, cut at +-3 std, whose
  variance is d^-1 (1 - 2 c phi(c) / (2 Phi(c) - 1)) with c = 3, i.e. 0.97334 / d.
"""

from __future__ import annotations

import math

#: Init std of the output projection in torchtitan's Qwen3 and transformers' Qwen3 (initializer_range).
QWEN3_OUTPUT_INIT_STD = 0.02


def truncated_normal_variance_factor(cutoff: float) -> float:
    """Var of a standard normal truncated to [-cutoff, cutoff]: 1 - 2 c phi(c) / (2 Phi(c) - 1)."""
    phi = math.exp(-cutoff**2 / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(cutoff / math.sqrt(2))  # 2 Phi(c) - 1
    return 1 - 2 * cutoff * phi / mass


#: Output-projection init -> its per-entry variance as a function of the hidden size d (module docstring).
OUTPUT_INIT_VARIANCE = {
    "normal_0.02": lambda d: QWEN3_OUTPUT_INIT_STD**2,
    "trunc_normal_inv_sqrt_hidden": lambda d: truncated_normal_variance_factor(3.0) / d,
}


def random_init_first_step_loss(vocab_size: int, hidden_size: int, output_init: str = "normal_0.02") -> float:
    """Expected first-step cross-entropy (nats) of a randomly initialised Qwen3.

    ``ln(vocab_size) + hidden_size * v / 2`` with ``v`` the output-init variance
    (module docstring). Qwen3-4B (V 151936, d 2560) gives 12.443 with the native
    init and 12.418 with the transformers backend's; the AWS walkthrough measured 12.43.

    Raises:
        ValueError: sizes below 2 / 1, or an unknown ``output_init``.
    """
    if vocab_size < 2 or hidden_size < 1:
        raise ValueError(f"need vocab_size >= 2 and hidden_size >= 1; got {vocab_size}, {hidden_size}")
    if output_init not in OUTPUT_INIT_VARIANCE:
        raise ValueError(f"output_init: unknown {output_init!r}; known: {', '.join(OUTPUT_INIT_VARIANCE)}")
    return math.log(vocab_size) + hidden_size * OUTPUT_INIT_VARIANCE[output_init](hidden_size) / 2
