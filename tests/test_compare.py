import math

import pytest

from tasks.compare import judge
from titanflow.expectations import random_init_first_step_loss
from titanflow.params import Tolerances

TINY_EXPECTED = random_init_first_step_loss(151_936, 64)  # the tiny model's vocab and hidden size


def test_first_step_within_tolerance_passes(tiny_assets):
    verdict = judge([TINY_EXPECTED + 0.1, 11.0], tiny_assets.weights_dir, "random", Tolerances())
    assert verdict.verdict == "pass" and verdict.expected_first_step_loss == pytest.approx(TINY_EXPECTED)
    assert verdict.tolerance == 0.15 and "derived" in verdict.expectation_source


def test_first_step_outside_tolerance_fails_with_both_numbers(tiny_assets):
    verdict = judge([TINY_EXPECTED + 0.2], tiny_assets.weights_dir, "random", Tolerances())
    assert verdict.verdict == "fail"
    assert f"{TINY_EXPECTED + 0.2:.4f}" in verdict.reason and f"{TINY_EXPECTED:.4f}" in verdict.reason


def test_nan_at_any_step_fails(tiny_assets):
    verdict = judge([TINY_EXPECTED, math.nan], tiny_assets.weights_dir, "random", Tolerances())
    assert verdict.verdict == "fail" and "non-finite" in verdict.reason
