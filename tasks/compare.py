"""compare_loss: judge the first-step loss against what is expected for the init.

Random init: the derived value (titanflow.expectations), from the vocab and
hidden sizes of the model actually trained (its config.json), +- the run's
tolerance. Pretrained init: the golden first-step loss of (scenario, target) in
``expectations/``, and at least ``pretrained_gap`` nats below the random-init
value, so weights that were silently not loaded cannot pass. A NaN or infinite
loss at any step fails regardless.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

from titan_cfg.model_spec import qwen3_shape
from titanflow.expectations import OUTPUT_INIT_VARIANCE, random_init_first_step_loss, read_curve
from titanflow.failures import non_finite_steps
from titanflow.params import Tolerances


class LossVerdict(BaseModel):
    """First-step loss against its expectation (nats); ``verdict`` is "pass" or "fail"."""

    first_step_loss: float
    expected_first_step_loss: float
    tolerance: float
    expectation_source: str
    verdict: str
    reason: str


def judge(losses: list[float], weights_dir: Path, init: str, tolerances: Tolerances,
          output_init: str = "normal_0.02", golden: Path | None = None) -> LossVerdict:
    """Compare ``losses[0]`` with the expectation for ``init`` (``output_init``: the
    scenario's output-projection init; ``golden``: the golden loss curve, whose step 1 is the
    pretrained expectation whatever steps the run has). Pretrained weights without a golden
    (the user's own) are held to the gap alone: at least ``pretrained_gap`` nats below random init.

    Raises:
        ValueError: no losses.
        FileNotFoundError: ``golden`` names a curve that does not exist (the message says how to record one).
    """
    if not losses:
        raise ValueError("compare_loss: no losses to judge")
    shape = qwen3_shape(weights_dir)
    random_expected = random_init_first_step_loss(shape.vocab_size, shape.hidden_size, output_init)
    first = losses[0]
    bound = random_expected - tolerances.pretrained_gap
    if init == "pretrained" and golden is None:
        expected, tol = bound, 0.0
        source = (f"no golden for these weights: at most the random-init {random_expected:.4f} - "
                  f"{tolerances.pretrained_gap} nats")
    elif init == "pretrained":
        expected, tol = read_curve(golden)[0][1], tolerances.pretrained_first_step_loss
        source = f"golden: {golden.name} step 1"
    else:
        expected, tol = random_expected, tolerances.first_step_loss
        variance = OUTPUT_INIT_VARIANCE[output_init](shape.hidden_size)
        source = (f"derived: ln({shape.vocab_size}) + {shape.hidden_size} x {variance:.6g} / 2 "
                  f"(random-init logits, {output_init} output init; titanflow.expectations)")
    bad_steps = non_finite_steps(losses)
    if bad_steps:
        verdict, reason = "fail", f"non-finite loss at steps {bad_steps}"
    elif init == "pretrained" and first > bound:
        verdict, reason = "fail", (f"first-step loss {first:.4f} is not {tolerances.pretrained_gap} nats below the "
                                   f"random-init {random_expected:.4f}: were the weights loaded?")
    elif init == "pretrained" and golden is None:
        verdict, reason = "pass", f"{first:.4f} <= {bound:.4f} (no golden for these weights: the gap alone)"
    elif abs(first - expected) <= tol:
        verdict, reason = "pass", f"|{first:.4f} - {expected:.4f}| = {abs(first - expected):.4f} <= {tol}"
    else:
        verdict, reason = "fail", f"|{first:.4f} - {expected:.4f}| = {abs(first - expected):.4f} > {tol}"
    return LossVerdict(first_step_loss=first, expected_first_step_loss=expected, tolerance=tol,
                       expectation_source=source, verdict=verdict, reason=reason)


@task(name="compare_loss")
def compare_loss(losses: list[float], weights_dir: str, init: str, tolerances: Tolerances,
                 output_init: str, golden: str | None) -> LossVerdict:
    """Prefect task: :func:`judge`, logging the verdict with both numbers."""
    verdict = judge(losses, Path(weights_dir), init, tolerances, output_init, Path(golden) if golden else None)
    get_run_logger().info("first-step loss %.4f vs expected %.4f: %s (%s)", verdict.first_step_loss,
                          verdict.expected_first_step_loss, verdict.verdict, verdict.reason)
    return verdict
