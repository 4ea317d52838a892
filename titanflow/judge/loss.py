"""The first-step loss verdict: the measured loss against what is expected for the init.

Random init: the derived value (titanflow.judge.expected_loss) from the vocab and hidden
sizes of the model trained (the job's shape), +- the run's tolerance; a published figure for the
job's weights (titan_cfg.published: the walkthrough's 12.43) is reported beside it. Pretrained
init, first found decides:

1. where the target computes it (cpu), the independent expectation (titanflow.judge.first_step:
   transformers' loss of the very weights loaded on the trainer's step-1 batch), which any machine
   repeats, so the verdict does not depend on which machine built the weights;
2. the published figure, when the job's weights id and workload are the figure's (job.json
   ``published`` with role "expectation": the walkthrough's 6.54 for Qwen/Qwen3-4B-Instruct-2507 on
   trn2), within its band;
3. the golden first-step loss of (scenario, target) (titanflow.judge.goldens), for the embedded weights;
4. nothing: the user's own weights are held to the gap alone.

The golden and any published figure that does not decide are reported beside. Whatever decides,
the loss must sit ``pretrained_gap`` nats below the random-init value, so weights that were
silently not loaded cannot pass. A NaN or infinite loss at any step fails regardless.
"""

from __future__ import annotations

from pathlib import Path

from titan_cfg.job import PublishedFirstStep
from titan_cfg.model_spec import Qwen3Shape
from titan_cfg.scenarios import SCENARIOS
from titanflow.judge.expected_loss import OUTPUT_INIT_VARIANCE, random_init_first_step_loss
from titanflow.judge.goldens import GOLDEN_DIR, RECORD_COMMAND, curve_path, golden_for
from titanflow.params import ScenarioRun
from titanflow.results import IndependentLoss, LossVerdict, non_finite_steps

def judge(losses: list[float], shape: Qwen3Shape, run: ScenarioRun, golden_dir: Path = GOLDEN_DIR,
          independent: IndependentLoss | None = None, published: PublishedFirstStep | None = None) -> LossVerdict:
    """Compare ``losses[0]`` (nats) with the expectation for ``run.init`` (module docstring).

    ``shape``: the trained model's (the job's); the golden is the one
    :func:`titanflow.judge.goldens.golden_for` gives the run from ``golden_dir``, whose step 1 is
    the pretrained expectation whatever steps the run has, unless ``independent`` (pretrained
    only) is given: then that is the expectation, within ``tolerances.independent_first_step_loss``;
    ``published``: the job's (job.json), the expectation within its band where its role says so.

    Raises:
        ValueError: no losses.
        FileNotFoundError: a pretrained run of the embedded weights has no golden curve
            (the message says how to record one).
    """
    if not losses:
        raise ValueError("compare_loss: no losses to judge")
    tolerances, output_init = run.tolerances, SCENARIOS[run.scenario].output_init
    golden = golden_for(run.scenario, run.target, run.init, run.weights, golden_dir, run.model_spec)
    pretrained = run.init == "pretrained"
    published_decides = pretrained and independent is None and published is not None and published.role == "expectation"
    if pretrained and run.weights is None and golden is None and independent is None and not published_decides:
        raise FileNotFoundError(f"no golden loss curve {curve_path(run.scenario, run.target, run.init, model_spec=run.model_spec).name}; "
                                f"record one with {RECORD_COMMAND}")
    random_expected = random_init_first_step_loss(shape.vocab_size, shape.hidden_size, output_init)
    first = losses[0]
    bound = random_expected - tolerances.pretrained_gap
    if run.init == "pretrained" and independent is not None:
        expected, tol = independent.loss, tolerances.independent_first_step_loss
        source = (f"independent: transformers' loss of the loaded weights on the trainer's step-1 batch "
                  f"({independent.tokens} tokens, {independent.ranks} ranks; titanflow.judge.first_step)")
        if golden is not None:
            source += f"; golden {golden.path.name} step 1 {golden.first_step_loss:.4f} beside it"
    elif published_decides:
        expected, tol = published.first_step_loss, published.band
        source = f"published: {published.source}"
    elif run.init == "pretrained" and golden is None:
        expected, tol = bound, 0.0
        source = (f"no golden for these weights: at most the random-init {random_expected:.4f} - "
                  f"{tolerances.pretrained_gap} nats")
    elif run.init == "pretrained":
        expected, tol = golden.first_step_loss, tolerances.pretrained_first_step_loss
        source = f"golden: {golden.path.name} step 1"
    else:
        expected, tol = random_expected, tolerances.first_step_loss
        variance = OUTPUT_INIT_VARIANCE[output_init](shape.hidden_size)
        source = (f"derived: ln({shape.vocab_size}) + {shape.hidden_size} x {variance:.6g} / 2 "
                  f"(random-init logits, {output_init} output init; titanflow.judge.expected_loss)")
    if published is not None and not published_decides:
        differs = f"; not its workload: {', '.join(published.workload_differences)}" if published.workload_differences else ""
        source += f"; published {published.first_step_loss} beside it ({published.source}{differs})"
    bad_steps = non_finite_steps(losses)
    if bad_steps:
        verdict, reason = "fail", f"non-finite loss at steps {bad_steps}"
    elif run.init == "pretrained" and first > bound:
        verdict, reason = "fail", (f"first-step loss {first:.4f} is not {tolerances.pretrained_gap} nats below the "
                                   f"random-init {random_expected:.4f}: were the weights loaded?")
    elif run.init == "pretrained" and golden is None and independent is None and not published_decides:
        verdict, reason = "pass", f"{first:.4f} <= {bound:.4f} (no golden for these weights: the gap alone)"
    else:
        places = 4 if tol >= 1e-3 else 6  # a 5e-5 tolerance needs the digits that show it
        gap, holds = abs(first - expected), abs(first - expected) <= tol
        verdict = "pass" if holds else "fail"
        reason = f"|{first:.{places}f} - {expected:.{places}f}| = {gap:.{places}f} {'<=' if holds else '>'} {tol}"
    return LossVerdict(first_step_loss=first, expected_first_step_loss=expected, tolerance=tol,
                       expectation_source=source, verdict=verdict, reason=reason, independent=independent,
                       golden_first_step_loss=golden.first_step_loss if golden and run.init == "pretrained" else None,
                       published=published)
