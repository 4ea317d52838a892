import math

import pytest

from titanflow.expectations import random_init_first_step_loss


def test_derivation_gives_walkthrough_figure_for_qwen3_4b():
    # Qwen3-4B: vocab 151936, hidden 2560 (its config.json). ln(151936) = 11.9312, 2560 * 0.02^2 / 2 = 0.512.
    derived = random_init_first_step_loss(151_936, 2560)
    assert derived == pytest.approx(11.93122 + 0.512, abs=1e-4)
    assert round(derived, 2) == 12.44
    # The AWS walkthrough published 12.43 from random init; the batch mean of the target logit
    # spreads first-step losses by about +-0.06 (measured, shared/notes), so they agree.
    assert abs(derived - 12.43) <= 0.06


def test_derivation_for_the_tiny_cpu_model():
    # vocab 151936, hidden 64: the width term is 64 * 0.0004 / 2 = 0.0128
    assert random_init_first_step_loss(151_936, 64) == pytest.approx(math.log(151_936) + 0.0128)


@pytest.mark.parametrize("args", [(1, 64), (151_936, 0), (151_936, 64, 0.0)])
def test_derivation_refuses_degenerate_sizes(args):
    with pytest.raises(ValueError):
        random_init_first_step_loss(*args)
