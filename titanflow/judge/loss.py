"""The first-step loss verdict: the measured loss against what the first expectation source that applies expects.

The sources and their order are titanflow.judge.expectations.SOURCES (each says when it applies and what it
expects; the table in docs/nightly.md, "First-step loss", lists them, and a test holds it to the tuple).

The golden and a published figure that do not decide are reported beside. Whatever decides, loaded weights must sit
``pretrained_gap`` nats below the random-init value, so weights that were silently not loaded cannot pass. A NaN or
infinite loss at any step fails regardless.
"""

from __future__ import annotations

from pathlib import Path

from titan_cfg.job import PublishedFirstStep
from titan_cfg.model_spec import Qwen3Shape
from titanflow.judge.expectations import GOLDEN_CURVE, Evidence, Expectation, decide
from titanflow.judge.goldens import GOLDEN_DIR
from titanflow.params import ScenarioRun
from titanflow.results import IndependentLoss, LossOutcome, LossVerdict, non_finite_steps


def judge(losses: list[float], shape: Qwen3Shape, run: ScenarioRun, golden_dir: Path = GOLDEN_DIR,
          independent: IndependentLoss | None = None, published: PublishedFirstStep | None = None,
          environment: dict | None = None, stack_digest: str | None = None,
          history_dir: Path | None = None) -> LossVerdict:
    """Compare ``losses[0]`` (nats) with the expectation of the first source that applies
    (titanflow.judge.expectations.decide; module docstring), then check every step.

    ``shape``: the trained model's (the job's); the golden is the one
    :func:`titanflow.judge.goldens.golden_for` gives the run from ``golden_dir``, whose step 1 is the expectation of
    the embedded weights whatever steps the run has; ``independent``: transformers' loss of the loaded weights
    (titanflow.judge.first_step), where computed; ``published``: the job's (job.json), the expectation within its
    band where its role says so; ``environment``, ``stack_digest``: the run's numerics environment and installed
    stack digest (summary.json's), which find the node baseline of its workload in ``history_dir`` (default the
    history folder) and its lane (titanflow.judge.expectations.NODE_BASELINE).

    Raises:
        ValueError: no losses.
        FileNotFoundError: no source applies: loaded weights of the embedded checkpoint without a golden curve
            (the message says how to record one).
    """
    if not losses:
        raise ValueError("compare_loss: no losses to judge")
    evidence = Evidence.of(losses, shape, run, golden_dir, independent, published, environment, stack_digest,
                           history_dir)
    _, expectation = decide(evidence)
    verdict, reason = _verdict(evidence, expectation)
    return LossVerdict(first_step_loss=losses[0], expected_first_step_loss=expectation.expected,
                       tolerance=expectation.tolerance, expectation_source=expectation.provenance, verdict=verdict,
                       reason=reason, independent=independent, golden_first_step_loss=GOLDEN_CURVE.figure(evidence),
                       published=published)


def _verdict(evidence: Evidence, expectation: Expectation) -> tuple[LossOutcome, str]:
    """The one verdict step: every step finite; loaded weights ``pretrained_gap`` below the random-init value
    (:attr:`Evidence.gap_bound`); then step 1 against the expectation (two-sided, or at most its bound)."""
    first, bound = evidence.losses[0], evidence.gap_bound
    bad_steps = non_finite_steps(evidence.losses)
    if bad_steps:
        return "fail", f"non-finite loss at steps {bad_steps}"
    if bound is not None and first > bound:
        return "fail", (f"first-step loss {first:.4f} is not {evidence.tolerances.pretrained_gap} nats below the "
                        f"random-init {evidence.random_init_loss:.4f}: were the weights loaded?")
    expected, tol = expectation.expected, expectation.tolerance
    if expectation.bound is not None:
        holds = first <= expected
        return ("pass" if holds else "fail"), (f"{first:.4f} {'<=' if holds else '>'} {expected:.4f} "
                                               f"({expectation.bound})")
    places = 4 if tol >= 1e-3 else 6  # a 5e-5 tolerance needs the digits that show it
    gap, holds = abs(first - expected), abs(first - expected) <= tol
    return ("pass" if holds else "fail"), (f"|{first:.{places}f} - {expected:.{places}f}| = {gap:.{places}f} "
                                           f"{'<=' if holds else '>'} {tol}")
