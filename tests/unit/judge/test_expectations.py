"""The first-step expectation sources (titanflow.judge.expectations): when each applies, what it expects, and their
order: the first that applies decides. Figures: the derived random-init loss of Qwen3-4B (V 151936, d 2560), 12.443
with the native output init and 12.418 with the transformers backend's (titanflow.judge.expected_loss); the AWS
walkthrough's published 6.54 (titan_cfg/published_expectations.toml); 7.9685, the first step another machine's
pretrained checkpoint gave, against the golden 8.0535 (tests/unit/judge/test_loss.py)."""

import json
import re
from typing import get_args

import pytest
from helpers import FIXTURES
from helpers.walkthrough import INSTRUCT, WALKTHROUGH

from titan_cfg.job import LOADS_WEIGHTS, Init
from titan_cfg.model_spec import qwen3_shape
from titan_cfg.published import published_for_job
from titanflow.judge.expectations import (
    DERIVED_RANDOM_INIT,
    GAP_ALONE,
    GOLDEN_CURVE,
    INDEPENDENT_FORWARD,
    NODE_BASELINE,
    PUBLISHED_FIGURE,
    SOURCES,
    Evidence,
    Expectation,
    Source,
    decide,
    wants_independent,
)
from titanflow.judge.goldens import read_curve, write_curve
from titanflow.params import ScenarioRun
from titanflow.paths import REPO_ROOT
from titanflow.results import IndependentLoss

#: Qwen3-4B's derived random-init first-step loss (titanflow.judge.expected_loss docstring).
NATIVE_4B, HF_BACKEND_4B = 12.443, 12.418


@pytest.fixture()
def shape():
    return qwen3_shape(FIXTURES / "qwen3-4b-instruct-2507")  # V 151936, d 2560


@pytest.fixture()
def golden(tmp_path):
    return read_curve(write_curve(tmp_path / "native-cpu-pretrained.curve.csv", [8.0535, 7.9], "key", {}, "test"))


def _evidence(shape, init="pretrained", scenario="native", **fields) -> Evidence:
    weights = fields.pop("weights", None)
    run = ScenarioRun(scenario=scenario, init=init, weights=weights)
    return Evidence(run=run, shape=shape, losses=fields.pop("losses", [7.9685]), weights_loaded=LOADS_WEIGHTS[init],
                    **fields)


def _independent(loss=7.96852):
    return IndependentLoss(loss=loss, tokens=1024, forwards=5, ranks=2, seconds=1.0)


def _figure(init="pretrained", workload=WALKTHROUGH):
    return published_for_job("hf_backend", "trn2", init, INSTRUCT, workload)


def test_every_init_says_whether_it_starts_from_loaded_weights():
    assert set(LOADS_WEIGHTS) == set(get_args(Init))
    assert LOADS_WEIGHTS == {"random": False, "pretrained": True}


# -- each source: when it applies, what it expects ------------------------------------------------------------------


def test_the_independent_forward_applies_to_loaded_weights_it_was_computed_for(shape, golden):
    evidence = _evidence(shape, independent=_independent(), golden=golden)
    assert INDEPENDENT_FORWARD.applies(evidence)
    expectation = INDEPENDENT_FORWARD.expects(evidence)
    assert (expectation.expected, expectation.tolerance) == (7.96852, 5e-5)  # Tolerances.independent_first_step_loss
    assert expectation.provenance.startswith("independent: transformers' loss of the loaded weights")
    assert expectation.provenance.endswith("; golden native-cpu-pretrained.curve.csv step 1 8.0535 beside it")
    assert not INDEPENDENT_FORWARD.applies(_evidence(shape))  # not computed
    assert not INDEPENDENT_FORWARD.applies(_evidence(shape, init="random", independent=_independent()))


def test_the_published_figure_applies_to_its_weights_on_its_workload(shape):
    evidence = _evidence(shape, published=_figure())
    assert PUBLISHED_FIGURE.applies(evidence)
    expectation = PUBLISHED_FIGURE.expects(evidence)
    assert (expectation.expected, expectation.tolerance) == (6.54, 0.05)
    assert expectation.provenance.startswith("published: AWS walkthrough")
    assert not PUBLISHED_FIGURE.applies(_evidence(shape, published=_figure(workload=WALKTHROUGH.model_copy(
        update={"seq_len": 4096}))))  # another workload: role beside
    assert not PUBLISHED_FIGURE.applies(_evidence(shape, init="random", published=_figure("random")))


def test_a_published_figure_that_does_not_decide_is_reported_beside_with_the_differences(shape):
    other = _figure(workload=WALKTHROUGH.model_copy(update={"seq_len": 4096}))
    assert PUBLISHED_FIGURE.beside(_evidence(shape, published=other)).startswith(
        "; published 6.54 beside it (AWS walkthrough")
    assert PUBLISHED_FIGURE.beside(_evidence(shape, published=other)).endswith(
        "; not its workload: seq_len 4096 (published: 2048))")
    assert PUBLISHED_FIGURE.beside(_evidence(shape)) is None


def test_the_golden_curve_applies_to_loaded_weights_with_a_golden(shape, golden):
    evidence = _evidence(shape, golden=golden)
    assert GOLDEN_CURVE.applies(evidence) and GOLDEN_CURVE.figure(evidence) == 8.0535
    expectation = GOLDEN_CURVE.expects(evidence)
    assert expectation == Expectation(8.0535, 0.05, "golden: native-cpu-pretrained.curve.csv step 1")
    assert not GOLDEN_CURVE.applies(_evidence(shape))
    # a random-init curve's step 1 is not an expectation: the derived value is
    assert not GOLDEN_CURVE.applies(_evidence(shape, init="random", golden=golden))
    assert GOLDEN_CURVE.figure(_evidence(shape, init="random", golden=golden)) is None


def test_the_gap_alone_applies_to_the_users_own_weights_as_a_one_sided_bound(shape):
    evidence = _evidence(shape, weights="Qwen/Qwen3-4B")  # weights given: not the embedded ones, no golden
    assert GAP_ALONE.applies(evidence)
    expectation = GAP_ALONE.expects(evidence)
    assert expectation.expected == pytest.approx(NATIVE_4B - 2.0, abs=5e-4)  # Tolerances.pretrained_gap
    assert expectation.tolerance == 0.0 and expectation.bound == "no golden for these weights: the gap alone"
    assert expectation.provenance == (f"no golden for these weights: at most the random-init "
                                      f"{evidence.random_init_loss:.4f} - 2.0 nats")
    assert not GAP_ALONE.applies(_evidence(shape))  # the embedded weights: their golden decides
    assert not GAP_ALONE.applies(_evidence(shape, init="random", weights="Qwen/Qwen3-4B"))


@pytest.mark.parametrize(("scenario", "derived"), [("native", NATIVE_4B), ("hf_backend", HF_BACKEND_4B)])
def test_the_derived_value_applies_to_random_init(shape, scenario, derived):
    evidence = _evidence(shape, init="random", scenario=scenario)
    assert DERIVED_RANDOM_INIT.applies(evidence)
    expectation = DERIVED_RANDOM_INIT.expects(evidence)
    assert expectation.expected == pytest.approx(derived, abs=5e-4) and expectation.tolerance == 0.15
    assert expectation.provenance.startswith("derived: ln(151936) + 2560 x ")
    assert not DERIVED_RANDOM_INIT.applies(_evidence(shape))


def test_the_independent_forward_is_wanted_for_loaded_weights_on_a_target_that_computes_it():
    assert wants_independent(ScenarioRun(init="pretrained"))  # cpu: a tiny model, about 3 s
    assert not wants_independent(ScenarioRun(init="random"))
    assert not wants_independent(ScenarioRun(target="trn2", init="pretrained"))


# -- the order: the first that applies decides -------------------------------------------------------------------


def test_the_sources_in_order():
    assert SOURCES == (NODE_BASELINE, INDEPENDENT_FORWARD, PUBLISHED_FIGURE, GOLDEN_CURVE, GAP_ALONE,
                       DERIVED_RANDOM_INIT)


def test_the_first_that_applies_decides_the_others_beside(shape, golden):
    everything = _evidence(shape, independent=_independent(), published=_figure(), golden=golden)
    # three apply; without a node baseline, the independent forward, which any machine repeats, goes first
    assert [s.applies(everything) for s in SOURCES] == [False, True, True, True, False, False]
    source, expectation = decide(everything)
    assert source is INDEPENDENT_FORWARD and expectation.expected == 7.96852
    assert "; golden native-cpu-pretrained.curve.csv step 1 8.0535 beside it; published 6.54 beside it" \
        in expectation.provenance
    source, expectation = decide(_evidence(shape, published=_figure(), golden=golden))
    assert source is PUBLISHED_FIGURE and "beside" not in expectation.provenance  # the figure decides
    assert decide(_evidence(shape, golden=golden))[0] is GOLDEN_CURVE
    assert decide(_evidence(shape, init="random", published=_figure("random"), golden=golden))[0] \
        is DERIVED_RANDOM_INIT


def test_a_new_source_is_one_entry_and_wins_where_it_goes_first(shape, golden):
    """What a node's own promoted baseline will do: one entry in front of the others."""
    baseline = Source("node baseline", applies=lambda e: e.weights_loaded,
                      expects=lambda e: Expectation(8.05, 0.01, "baseline: a promoted run"))
    evidence = _evidence(shape, independent=_independent(), published=_figure(), golden=golden)
    source, expectation = decide(evidence, (baseline, *SOURCES))
    assert source is baseline and expectation.expected == 8.05
    assert expectation.provenance == "baseline: a promoted run; published 6.54 beside it (" \
        + evidence.published.source + ")"
    assert decide(_evidence(shape, init="random"), (baseline, *SOURCES))[0] is DERIVED_RANDOM_INIT


ENVIRONMENT = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX512", "isa_flags": ["avx512f"],
               "versions": {"torch": "2.13.0+cpu"}}


def _promoted(tmp_path, run: ScenarioRun, losses=(7.9685, 7.9)) -> None:
    """``run`` promoted as the node's baseline in ``tmp_path`` (a history row of it, computed in ENVIRONMENT with
    the installed stack digest "aaaa")."""
    from helpers.history_rows import history_row

    from titan_cfg.targets import node_of
    from titanflow.judge import baselines
    from titanflow.judge.environment import environment_key, hardware
    from titanflow.judge.workload import config_key

    parameters = run.model_dump()
    row = history_row("promoted", 1, init=run.init, losses=list(losses), config_key=config_key(parameters),
                      parameters=json.dumps(parameters, default=str), hardware=hardware(node_of("cpu"), ENVIRONMENT),
                      environment_key=environment_key(ENVIRONMENT), stack_digest="aaaa")
    baselines.promote(row, {"environment": ENVIRONMENT}, "first night", tmp_path)


def test_a_node_baseline_expects_the_users_weights_first_step_in_its_lane(shape, tmp_path):
    """User weights (no golden is theirs) had only the gap as their expectation where no independent forward is
    computed (trn2; here: pretrained init, none given); with a baseline of their workload on this hardware,
    its step 1 decides: within the golden_curve rule's margin (0.02) in the baseline's environment, its band (0.2)
    in another (regression_rules.toml)."""
    run = ScenarioRun(scenario="native", init="pretrained", weights="org/my-qwen3")
    _promoted(tmp_path, run)
    exact = Evidence.of([7.97], shape, run, environment=ENVIRONMENT, stack_digest="aaaa", history_dir=tmp_path)
    source, expectation = decide(exact)
    assert source is NODE_BASELINE and (expectation.expected, expectation.tolerance) == (7.9685, 0.02)
    assert "step 1 (run promoted, promoted " in expectation.provenance
    assert "exact lane: the same environment" in expectation.provenance
    band = Evidence.of([7.97], shape, run, environment=ENVIRONMENT, stack_digest="bbbb", history_dir=tmp_path)
    assert decide(band)[1].tolerance == 0.2 and "band lane" in decide(band)[1].provenance
    # no baseline of this workload (other weights), or no environment recorded: the sources after it
    other = ScenarioRun(scenario="native", init="pretrained", weights="org/other")
    assert decide(Evidence.of([7.97], shape, other, environment=ENVIRONMENT, history_dir=tmp_path))[0] is GAP_ALONE
    assert decide(Evidence.of([7.97], shape, run, history_dir=tmp_path))[0] is GAP_ALONE


def test_when_none_applies_the_message_says_how_to_record_a_golden(shape):
    with pytest.raises(FileNotFoundError, match="no golden loss curve native-cpu-pretrained.curve.csv; "
                                                "record one with make goldens"):
        decide(_evidence(shape))


def test_the_judging_page_lists_the_sources_in_order():
    page = (REPO_ROOT / "docs" / "nightly.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", page.split("## First-step loss")[1].split("\n## ")[0], re.M)
    assert [(int(order), name.strip()) for order, name in rows] == [(i, s.name) for i, s in enumerate(SOURCES, 1)]
