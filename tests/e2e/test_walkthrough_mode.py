"""End to end on CPU in the walkthrough mode (``--model-spec walkthrough``): every setting as the AWS walkthrough's
config functions state it (titan_cfg.scenarios.Scenario.walkthrough), each run held to its own golden curve
(goldens/loss_curves/<scenario>-cpu-random-walkthrough.curve.csv; TITANFLOW_UPDATE_GOLDEN=1 records them again).

The scenarios whose walkthrough mode differs most from the default, those on torchtitan's own decoder
(``Scenario.torchtitan_decoder``, where the mode's spec and attention apply): native (the 4B flavor's spec, attention
causal over the packed row, a warm-up over all 10 steps, a float16 export) and moe (the same, and upstream's
expert-bias load balancing, whose bias a Hugging Face checkpoint cannot hold).
"""

from pathlib import Path

import pytest
from helpers.scenario_runs import golden_run

from titan_cfg.job import Job
from titan_cfg.scenarios import SCENARIOS
from titanflow.judge.expected_loss import random_init_first_step_loss


#: The scenarios with a golden curve of their own in the walkthrough mode: torchtitan's own decoders (native, moe).
DECODER_SCENARIOS = [name for name, scenario in SCENARIOS.items() if scenario.torchtitan_decoder]


@pytest.mark.parametrize("scenario", DECODER_SCENARIOS)
def test_the_walkthrough_mode_passes_against_its_own_golden(tmp_path, scenario, prefect_api):
    summary, _ = golden_run(tmp_path, scenario, "--model-spec", "walkthrough", api=prefect_api)
    recipe = SCENARIOS[scenario].walkthrough
    assert summary.parameters["model_spec"] == "walkthrough"
    assert summary.kernels["attention"] == "causal"  # the packed row as one sequence, no mask
    (curve,) = [f for f in summary.findings if f.metric == "losses"]
    assert "-walkthrough.curve.csv" in curve.detail  # its own golden, not the default mode's
    # step 1 is the same random-init expectation as the default mode: ln V + 64 x 0.02^2 / 2
    assert abs(summary.loss.first_step_loss - random_init_first_step_loss(151_936, 64)) <= 0.15
    job = Job.read(Path(summary.export.export_dir).parent / "job" / "job.json")
    # the config function's warm-up (600) capped to the 10 steps, its float16 export and full checkpointing
    assert (job.warmup_steps, job.export_dtype, job.activation_checkpoint) == (10, "float16", "full")
    assert job.load_balance_coeff == recipe.load_balance_coeff
    assert summary.validation.structure.problems == []
    parity = summary.validation.parity
    assert parity.kl <= 1e-6 and parity.top1_agreement == 1.0
    if SCENARIOS[scenario].model_type == "qwen3_moe":
        # the export routes as the trained model does once its load-balancing bias is set aside, and the bias
        # trained over 10 steps moved some tokens' experts (what the export gives up of the trained routing)
        assert parity.router_agreement == 1.0
        assert 0 < parity.expert_bias_router_agreement < 1.0
    else:
        assert parity.expert_bias_router_agreement is None
