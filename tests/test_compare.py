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


def _golden(tmp_path, loss):
    from titanflow.expectations import write_curve

    return write_curve(tmp_path / "native-cpu-pretrained.curve.csv", [loss, loss - 0.1], "key", {}, "test golden")


def test_pretrained_within_golden_tolerance_passes(tmp_path, tiny_assets):
    verdict = judge([6.50, 6.4], tiny_assets.weights_dir, "pretrained", Tolerances(), golden=_golden(tmp_path, 6.52))
    assert verdict.verdict == "pass" and verdict.expected_first_step_loss == 6.52
    assert verdict.tolerance == 0.05 and verdict.expectation_source.startswith("golden")


def test_pretrained_weights_that_were_not_loaded_fail_even_against_a_bad_golden(tmp_path, tiny_assets):
    # a golden recorded from a broken run (random-init level) must not make a silent skip pass
    verdict = judge([TINY_EXPECTED], tiny_assets.weights_dir, "pretrained", Tolerances(),
                    golden=_golden(tmp_path, TINY_EXPECTED))
    assert verdict.verdict == "fail" and "were the weights loaded" in verdict.reason


def test_pretrained_without_golden_says_how_to_record_one(tmp_path, tiny_assets):
    with pytest.raises(FileNotFoundError, match="TITANFLOW_UPDATE_GOLDEN"):
        judge([6.5], tiny_assets.weights_dir, "pretrained", Tolerances(), golden=tmp_path / "none.txt")


def test_pretrained_user_weights_without_golden_are_held_to_the_gap(tiny_assets):
    """The goldens belong to the embedded weights; the user's own are judged by the 2-nat gap alone."""
    passed = judge([9.0], tiny_assets.weights_dir, "pretrained", Tolerances(), golden=None)
    assert passed.verdict == "pass" and passed.expected_first_step_loss == pytest.approx(TINY_EXPECTED - 2.0)
    assert "no golden for these weights" in passed.expectation_source
    failed = judge([TINY_EXPECTED - 1.0], tiny_assets.weights_dir, "pretrained", Tolerances(), golden=None)
    assert failed.verdict == "fail" and "were the weights loaded" in failed.reason
