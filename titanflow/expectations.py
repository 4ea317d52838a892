"""What a run's loss should be, and where each figure comes from.

Random init (derived): with logits z_i ~ N(0, s^2) i.i.d. over a vocabulary of
V tokens, E[-log softmax(z)_target] = E[logsumexp z] - E[z_target]
~ ln V + s^2/2 (the lognormal mean: E[e^z] = e^{s^2/2}, so
logsumexp z ~ ln(V e^{s^2/2})), and E[z_target] = 0 at init. After the final
RMSNorm each hidden vector h has |h|^2 ~ d (the hidden size), so with an output
matrix of i.i.d. N(0, std_out^2) entries s^2 = d std_out^2. Both torchtitan's
Qwen3 (models/qwen3/__init__.py: lm_head normal std 0.02; tied embeddings skip
their own init and share it) and transformers (initializer_range 0.02) use
std_out = 0.02.
"""

from __future__ import annotations

import math

#: Init std of the output projection in torchtitan's Qwen3 and transformers' Qwen3 (initializer_range).
QWEN3_OUTPUT_INIT_STD = 0.02


def random_init_first_step_loss(vocab_size: int, hidden_size: int, std_out: float = QWEN3_OUTPUT_INIT_STD) -> float:
    """Expected first-step cross-entropy (nats) of a randomly initialised Qwen3.

    ``ln(vocab_size) + hidden_size * std_out**2 / 2`` (module docstring).
    Qwen3-4B (V 151936, d 2560) gives 12.443; the AWS walkthrough measured 12.43.

    Raises:
        ValueError: non-positive sizes or std.
    """
    if vocab_size < 2 or hidden_size < 1 or std_out <= 0:
        raise ValueError(f"need vocab_size >= 2, hidden_size >= 1, std_out > 0; got {vocab_size}, {hidden_size}, {std_out}")
    return math.log(vocab_size) + hidden_size * std_out**2 / 2
