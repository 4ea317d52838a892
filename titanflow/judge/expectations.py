"""Where a run's first-step loss expectation comes from: an ordered list of sources, the first that applies decides.

Each :class:`Source` says when it applies to what the judge knows of a run (:class:`Evidence`: the run, its measured
losses, the node's baseline of its workload, the golden curve, the independent loss, the published figure, and whether
the run started from loaded weights, titan_cfg.job.LOADS_WEIGHTS) and what it then expects (:class:`Expectation`: the
first-step loss in nats, the tolerance, and where the figure comes from, the verdict's ``expectation_source``). :data:`SOURCES` is the order;
:func:`decide` takes the first that applies, and titanflow.judge.loss.judge makes the one verdict. A source that does
not decide may report its figure beside the one that does (:attr:`Source.beside`: the published figure).

    from titanflow.judge.expectations import Evidence, decide
    source, expectation = decide(Evidence.of(losses, shape, run, published=job.published))

Adding a source is one entry in :data:`SOURCES`, at its place in the order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from titan_cfg.job import LOADS_WEIGHTS, PublishedFirstStep
from titan_cfg.model_spec import Qwen3Shape
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS
from titanflow.judge.baselines import NodeBaseline, baseline_of_run, same_environment
from titanflow.judge.environment import environment_key
from titanflow.judge.expected_loss import OUTPUT_INIT_VARIANCE, random_init_first_step_loss
from titanflow.judge.goldens import GOLDEN_DIR, RECORD_COMMAND, GoldenCurve, curve_path, golden_for
from titanflow.judge.regression import curve_rule
from titanflow.params import ScenarioRun, Tolerances
from titanflow.results import IndependentLoss


@dataclass(frozen=True)
class Evidence:
    """What the judge knows of one run: ``losses`` (nats, rank 0, step 1 first), ``shape`` (the trained model's, the
    job's), the ``golden`` curve that applies to it (titanflow.judge.goldens.golden_for), transformers' loss of the
    loaded weights (``independent``, titanflow.judge.first_step, where computed), the ``published`` figure the job
    records (titan_cfg.published), whether the run started from loaded weights (``weights_loaded``), the ``node``
    baseline of its workload on its hardware (titanflow.judge.baselines) and whether the run computes in that
    baseline's environment (``exact_lane``)."""

    run: ScenarioRun
    shape: Qwen3Shape
    losses: list[float]
    weights_loaded: bool
    golden: GoldenCurve | None = None
    independent: IndependentLoss | None = None
    published: PublishedFirstStep | None = None
    node: NodeBaseline | None = None
    exact_lane: bool = False

    @classmethod
    def of(cls, losses: list[float], shape: Qwen3Shape, run: ScenarioRun, golden_dir: Path = GOLDEN_DIR,
           independent: IndependentLoss | None = None, published: PublishedFirstStep | None = None,
           environment: dict | None = None, stack_digest: str | None = None,
           history_dir: Path | None = None) -> Evidence:
        """The evidence of ``run``: its golden read from ``golden_dir``, ``weights_loaded`` from its init
        (titan_cfg.job.LOADS_WEIGHTS), the node baseline of its workload in ``history_dir`` (default the history
        folder) for the run's numerics ``environment`` (None: no baseline is looked for) and ``stack_digest``
        (titanflow.judge.environment: the exact lane needs both the baseline's).

        Raises:
            ValueError: a golden file without ``step``/``loss`` columns (titanflow.judge.goldens.read_curve).
            titanflow.judge.baselines.BaselineError: the baseline file of the run's workload does not read.
        """
        golden = golden_for(run.scenario, run.target, run.init, run.weights, golden_dir, run.model_spec)
        node = baseline_of_run(run.model_dump(), environment, history_dir) if environment else None
        exact = node is not None and same_environment(node, environment_key(environment), stack_digest)
        return cls(run=run, shape=shape, losses=list(losses), weights_loaded=LOADS_WEIGHTS[run.init], golden=golden,
                   independent=independent, published=published, node=node, exact_lane=exact)

    @property
    def tolerances(self) -> Tolerances:
        """The run's tolerances (titanflow.params.Tolerances)."""
        return self.run.tolerances

    @property
    def output_init(self) -> str:
        """The scenario's output-projection init (titan_cfg.scenarios.Scenario.output_init)."""
        return SCENARIOS[self.run.scenario].output_init

    @property
    def random_init_loss(self) -> float:
        """The derived first-step loss (nats) of the model at random init (titanflow.judge.expected_loss)."""
        return random_init_first_step_loss(self.shape.vocab_size, self.shape.hidden_size, self.output_init)

    @property
    def gap_bound(self) -> float | None:
        """Loaded weights: the most their first step may be (nats), ``pretrained_gap`` below the random-init value,
        so weights that were silently not loaded fail whatever the expectation; None for random init."""
        return self.random_init_loss - self.tolerances.pretrained_gap if self.weights_loaded else None


@dataclass(frozen=True)
class Expectation:
    """What a source expects of step 1: ``expected`` (nats) within ``tolerance`` (allowed |measured - expected|,
    nats), or, where ``bound`` says why, at most ``expected`` (one-sided, ``tolerance`` 0); ``provenance``: where
    the figure comes from, with what is reported beside it (the verdict's ``expectation_source``)."""

    expected: float
    tolerance: float
    provenance: str
    bound: str | None = None


def _nothing_beside(evidence: Evidence) -> str | None:
    """A source that reports nothing when another decides."""
    return None


@dataclass(frozen=True)
class Source:
    """One expectation source, an entry of :data:`SOURCES`: ``applies(evidence)`` says whether it gives the run's
    expectation; ``expects(evidence)``, called only where it applies, gives it; ``beside(evidence)``: the note it
    adds to the provenance of another source that decides (None: nothing)."""

    name: str
    applies: Callable[[Evidence], bool]
    expects: Callable[[Evidence], Expectation]
    beside: Callable[[Evidence], str | None] = _nothing_beside

    def figure(self, evidence: Evidence) -> float | None:
        """The first-step loss (nats) it expects of this run, whether or not it decides; None where it does not
        apply."""
        return self.expects(evidence).expected if self.applies(evidence) else None


# --- the sources, in their order in SOURCES --------------------------------------------------------------------------

def _node_baseline(e: Evidence) -> Expectation:
    """The promoted run's step 1, within the golden_curve rule's margin in the exact lane (the baseline's environment)
    or its band in the band lane (regression_rules.toml: the band measured across environments)."""
    node, rule = e.node, curve_rule()
    tolerance = rule.margin if e.exact_lane else (rule.band or rule.margin)
    lane = "exact lane: the same environment" if e.exact_lane else "band lane: another environment than the baseline's"
    return Expectation(node.losses[1], tolerance, f"node baseline {node.key} step 1 (run {node.run_id}, promoted "
                       f"{node.promoted_at:%Y-%m-%d}; {lane}; titanflow.judge.baselines)")


#: The node's own baseline of the run's workload on its hardware (titanflow.judge.baselines: a passed run promoted
#: on purpose), wherever one is in force: user weights included, on a node where no golden can be recorded.
NODE_BASELINE = Source(
    "node baseline",
    applies=lambda e: e.node is not None and 1 in e.node.losses,
    expects=_node_baseline,
)


def _independent(e: Evidence) -> Expectation:
    """transformers' loss of the very weights loaded on the trainer's step-1 batch, which any machine repeats, within
    ``independent_first_step_loss``; the golden's step 1 beside it."""
    independent = e.independent
    provenance = (f"independent: transformers' loss of the loaded weights on the trainer's step-1 batch "
                  f"({independent.tokens} tokens, {independent.ranks} ranks; titanflow.judge.first_step)")
    if e.golden is not None:
        provenance += f"; golden {e.golden.path.name} step 1 {e.golden.first_step_loss:.4f} beside it"
    return Expectation(independent.loss, e.tolerances.independent_first_step_loss, provenance)


#: Loaded weights on a target that computes it (titan_cfg.targets.Target.independent_first_step; cpu).
INDEPENDENT_FORWARD = Source(
    "independent forward",
    applies=lambda e: e.weights_loaded and e.independent is not None,
    expects=_independent,
)


def _published_beside(e: Evidence) -> str | None:
    """A published figure that does not decide, reported beside with the workload differences that keep it out."""
    published = e.published
    if published is None:
        return None
    differences = published.workload_differences
    differs = f"; not its workload: {', '.join(differences)}" if differences else ""
    return f"; published {published.first_step_loss} beside it ({published.source}{differs})"


#: Loaded weights of the figure's weights id on its workload (job.json ``published`` with role "expectation": the
#: walkthrough's 6.54 for Qwen/Qwen3-4B-Instruct-2507 on trn2), within its band; reported beside otherwise.
PUBLISHED_FIGURE = Source(
    "published figure",
    applies=lambda e: e.weights_loaded and e.published is not None and e.published.role == "expectation",
    expects=lambda e: Expectation(e.published.first_step_loss, e.published.band, f"published: {e.published.source}"),
    beside=_published_beside,
)

#: Loaded weights of the embedded checkpoint: the golden first step of (scenario, target) (titanflow.judge.goldens),
#: within ``pretrained_first_step_loss``.
GOLDEN_CURVE = Source(
    "golden curve",
    applies=lambda e: e.weights_loaded and e.golden is not None,
    expects=lambda e: Expectation(e.golden.first_step_loss, e.tolerances.pretrained_first_step_loss,
                                  f"golden: {e.golden.path.name} step 1"),
)


def _gap_alone(e: Evidence) -> Expectation:
    """At most the random-init value less ``pretrained_gap``: the only expectation of weights no golden is of."""
    return Expectation(e.gap_bound, 0.0, f"no golden for these weights: at most the random-init "
                       f"{e.random_init_loss:.4f} - {e.tolerances.pretrained_gap} nats",
                       bound="no golden for these weights: the gap alone")


#: Loaded weights of the user's own (``weights`` given: the goldens are of the embedded weights): the gap alone.
GAP_ALONE = Source(
    "gap alone",
    applies=lambda e: e.weights_loaded and e.run.weights is not None,
    expects=_gap_alone,
)


def _derived(e: Evidence) -> Expectation:
    """ln V + d v / 2 from the job's vocab and hidden sizes and the scenario's output init, within
    ``first_step_loss``."""
    variance = OUTPUT_INIT_VARIANCE[e.output_init](e.shape.hidden_size)
    return Expectation(e.random_init_loss, e.tolerances.first_step_loss,
                       f"derived: ln({e.shape.vocab_size}) + {e.shape.hidden_size} x {variance:.6g} / 2 "
                       f"(random-init logits, {e.output_init} output init; titanflow.judge.expected_loss)")


#: Random init: the derived value (titanflow.judge.expected_loss).
DERIVED_RANDOM_INIT = Source(
    "derived random-init value",
    applies=lambda e: not e.weights_loaded,
    expects=_derived,
)

#: The expectation sources, in order: the first that applies to a run decides (:func:`decide`).
SOURCES: tuple[Source, ...] = (
    NODE_BASELINE,
    INDEPENDENT_FORWARD,
    PUBLISHED_FIGURE,
    GOLDEN_CURVE,
    GAP_ALONE,
    DERIVED_RANDOM_INIT,
)


def decide(evidence: Evidence, sources: tuple[Source, ...] = SOURCES) -> tuple[Source, Expectation]:
    """The first of ``sources`` that applies to ``evidence`` and its expectation, the notes of the others reported
    beside it (:attr:`Source.beside`, in order) appended to its provenance.

    Raises:
        FileNotFoundError: none applies (loaded weights of the embedded checkpoint without a golden curve, the
            independent loss or a published figure): the message names the golden and how to record one.
    """
    source = next((s for s in sources if s.applies(evidence)), None)
    if source is None:
        run = evidence.run
        golden = curve_path(run.scenario, run.target, run.init, model_spec=run.model_spec)
        raise FileNotFoundError(f"no golden loss curve {golden.name}; record one with {RECORD_COMMAND}")
    expectation = source.expects(evidence)
    notes = [note for other in sources if other is not source and (note := other.beside(evidence))]
    return source, replace(expectation, provenance=expectation.provenance + "".join(notes))


def wants_independent(run: ScenarioRun) -> bool:
    """Whether the independent forward (:data:`INDEPENDENT_FORWARD`, titanflow.judge.first_step) is to be computed
    for ``run``: it starts from loaded weights, on a target that computes it
    (titan_cfg.targets.Target.independent_first_step)."""
    return LOADS_WEIGHTS[run.init] and TARGETS[run.target]().independent_first_step
