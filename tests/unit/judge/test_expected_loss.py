import math

import pytest

from titanflow.judge.expected_loss import random_init_first_step_loss, truncated_normal_variance_factor


def test_derivation_gives_walkthrough_figure_for_qwen3_4b():
    # Qwen3-4B: vocab 151936, hidden 2560 (its config.json). ln(151936) = 11.9312, 2560 * 0.02^2 / 2 = 0.512.
    derived = random_init_first_step_loss(151_936, 2560)
    assert derived == pytest.approx(11.93122 + 0.512, abs=1e-4)
    assert round(derived, 2) == 12.44
    # The AWS walkthrough published 12.43 from random init; the batch mean of the target logit
    # spreads first-step losses by about +-0.06 (measured: docs/measurements.md), so they agree.
    assert abs(derived - 12.43) <= 0.06


def test_derivation_for_the_tiny_cpu_model():
    # vocab 151936, hidden 64: the width term is 64 * 0.0004 / 2 = 0.0128
    assert random_init_first_step_loss(151_936, 64) == pytest.approx(math.log(151_936) + 0.0128)


@pytest.mark.parametrize("args", [(1, 64), (151_936, 0), (151_936, 64, "uniform")])
def test_derivation_refuses_degenerate_sizes_and_unknown_inits(args):
    with pytest.raises(ValueError):
        random_init_first_step_loss(*args)


def test_truncated_normal_variance_matches_torch_init():
    # torchtitan's transformers backend inits lm_head with trunc_normal_(std=d**-0.5, a=-3 std, b=3 std).
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    samples = torch.nn.init.trunc_normal_(torch.empty(2_000_000, dtype=torch.float64), std=1.0, a=-3.0, b=3.0)
    assert truncated_normal_variance_factor(3.0) == pytest.approx(0.97334, abs=1e-5)
    assert samples.var().item() == pytest.approx(truncated_normal_variance_factor(3.0), abs=3e-3)


def test_transformers_backend_init_also_lands_near_the_walkthrough_figure():
    # ln(151936) + 2560 * (0.97334 / 2560) / 2 = 11.9312 + 0.4867
    derived = random_init_first_step_loss(151_936, 2560, "trunc_normal_inv_sqrt_hidden")
    assert derived == pytest.approx(12.4179, abs=1e-4)
    assert abs(derived - 12.43) <= 0.06
