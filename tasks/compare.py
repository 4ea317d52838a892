"""compare_loss: judge the first-step loss against what is expected for the init.

Random init: the derived value (titanflow.expectations), from the vocab and
hidden sizes of the model actually trained (its config.json), +- the run's
tolerance. A NaN or infinite loss at any step fails regardless.
"""

from __future__ import annotations

import math
from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

from titan_cfg.model_spec import qwen3_shape
from titanflow.expectations import OUTPUT_INIT_VARIANCE, random_init_first_step_loss
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
          output_init: str = "normal_0.02") -> LossVerdict:
    """Compare ``losses[0]`` with the expectation for ``init`` (``output_init``: the
    scenario's output-projection init, titanflow.expectations).

    Raises:
        ValueError: no losses, or an init with no expectation defined.
    """
    if not losses:
        raise ValueError("compare_loss: no losses to judge")
    if init != "random":
        raise ValueError(f"init: no first-step expectation is defined for {init!r}")
    shape = qwen3_shape(weights_dir)
    expected = random_init_first_step_loss(shape.vocab_size, shape.hidden_size, output_init)
    variance = OUTPUT_INIT_VARIANCE[output_init](shape.hidden_size)
    source = (f"derived: ln({shape.vocab_size}) + {shape.hidden_size} x {variance:.6g} / 2 "
              f"(random-init logits, {output_init} output init; titanflow.expectations)")
    first, tol = losses[0], tolerances.first_step_loss
    bad_steps = [i + 1 for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad_steps:
        verdict, reason = "fail", f"non-finite loss at steps {bad_steps}"
    elif abs(first - expected) <= tol:
        verdict, reason = "pass", f"|{first:.4f} - {expected:.4f}| = {abs(first - expected):.4f} <= {tol}"
    else:
        verdict, reason = "fail", f"|{first:.4f} - {expected:.4f}| = {abs(first - expected):.4f} > {tol}"
    return LossVerdict(first_step_loss=first, expected_first_step_loss=expected, tolerance=tol,
                       expectation_source=source, verdict=verdict, reason=reason)


@task(name="compare_loss")
def compare_loss(losses: list[float], weights_dir: str, init: str, tolerances: Tolerances,
                 output_init: str) -> LossVerdict:
    """Prefect task: :func:`judge`, logging the verdict with both numbers."""
    verdict = judge(losses, Path(weights_dir), init, tolerances, output_init)
    get_run_logger().info("first-step loss %.4f vs expected %.4f: %s (%s)", verdict.first_step_loss,
                          verdict.expected_first_step_loss, verdict.verdict, verdict.reason)
    return verdict
