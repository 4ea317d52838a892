"""The qwen3-nightly suite: what it runs, how it reports, and its command line."""

import pytest

from titanflow.run.nightly_plan import nightly_suite


def test_default_suite_is_every_scenario_with_both_inits():
    from titan_cfg.scenarios import SCENARIOS

    pairs = nightly_suite()
    assert pairs == [(s, i) for s in SCENARIOS for i in ("random", "pretrained")]
    assert len(pairs) == 2 * len(SCENARIOS) and ("moe", "pretrained") in pairs  # every scenario x random, pretrained
    assert nightly_suite(["moe"], ["random"]) == [("moe", "random")]


def test_unknown_scenario_is_refused_with_the_known_names():
    from titan_cfg.scenarios import SCENARIOS

    with pytest.raises(ValueError, match=r"unknown \['dense'\]; scenarios: " + ", ".join(SCENARIOS) + "; inits: "
                       "random, pretrained$"):
        nightly_suite(["dense"])


def test_a_scenario_or_init_given_twice_is_refused_rather_than_run_twice(capsys):
    with pytest.raises(ValueError, match="scenarios: native given more than once; fix: give each once"):
        nightly_suite(["native", "moe", "native"])
    with pytest.raises(ValueError, match="inits: random given more than once"):
        nightly_suite(["moe"], ["random", "random"])
    from titanflow.cli import main

    assert main(["nightly", "--scenarios", "moe", "moe"]) == 2
    assert "scenarios: moe given more than once" in capsys.readouterr().err


def test_cli_refuses_bad_input_before_any_server_starts(capsys):
    from titanflow.cli import main

    assert main(["nightly", "--target", "tpu"]) == 2
    assert "target: unknown 'tpu'; fix: pass one of cpu, trn2, cuda" in capsys.readouterr().err


def test_cli_tells_bad_numbers_as_titanflow_run_does_before_any_server_starts(capsys):
    """Every run's parameters are validated first (titanflow.run.nightly_plan.nightly_runs), each error told by
    titanflow.refusal.describe, not as the failed state of a flow run."""
    import time

    from titanflow.cli import main

    start = time.monotonic()
    assert main(["nightly", "--steps", "0", "--lr", "-1"]) == 2
    assert time.monotonic() - start < 5  # no server started
    assert capsys.readouterr().err == ("titanflow: bad input:\n"
                                       "steps: Input should be greater than or equal to 1, given 0; fix: pass 1 or more "
                                       "for --steps\n"
                                       "lr: Input should be greater than 0, given -1.0; fix: pass more than 0 for --lr\n")


def test_the_suite_runs_take_the_targets_weights():
    """trn2's runs are the walkthrough's models (titan_cfg.scenarios.ON_NODE); cpu's the
    embedded tiny ones."""
    from titanflow.run.nightly_plan import nightly_runs

    trn2 = {(p["scenario"], p["init"]): (p.get("weights"), run.trim) for p, run in nightly_runs("trn2", steps=3)}
    assert trn2[("hf_backend", "pretrained")] == ("Qwen/Qwen3-4B-Instruct-2507", None)
    assert trn2[("moe", "random")][0] == "Qwen/Qwen3-30B-A3B"
    assert (trn2[("moe", "random")][1].layers, trn2[("moe", "random")][1].experts) == (4, 64)
    assert [(p, run.steps) for p, run in nightly_runs("cpu", ["native"], ["random"], steps=None, lr=None)] == [
        ({"scenario": "native", "target": "cpu", "init": "random"}, 10)]


def test_outcome_and_report_of_a_failed_and_a_passed_run(tmp_path):
    from prefect.states import Completed, Failed

    from titanflow.record.summary import RunSummary
    from titanflow.report.nightly import outcome, suite_markdown
    from titanflow.results import Finding, LossVerdict

    loss = LossVerdict(first_step_loss=11.94, expected_first_step_loss=11.944, tolerance=0.15,
                       expectation_source="derived", verdict="pass", reason="|11.9400 - 11.9440| = 0.0040 <= 0.15")
    slower = Finding(metric="tokens_per_s", value=400.0, baseline=600.0, margin=0.05, passed=False,
                     status="flagged", finding_class="performance", detail="-33 %", streak="1 of 2")
    off_curve = Finding(metric="losses", value=11.2, baseline=11.5, margin=0.02, passed=False, status="fail",
                        finding_class="numerics", detail="step 2 ...")
    passed = tmp_path / "a" / "summary.json"
    passed.parent.mkdir()
    passed.write_text(RunSummary(run_id="a", scenario="native", target="cpu", init="random", steps=2, loss=loss,
                                 findings=[slower], verdict="pass", reason=loss.reason).model_dump_json())
    failed = tmp_path / "b" / "summary.json"
    failed.parent.mkdir()
    failed.write_text(RunSummary(run_id="b", scenario="moe", target="cpu", init="random", steps=2, loss=loss,
                                 findings=[off_curve], verdict="fail",
                                 reason="loss curve regression: losses step 2 ...").model_dump_json())
    rows = [outcome(passed, Completed(), scenario="native", init="random", run_id="a"),
            outcome(failed, Failed(), scenario="moe", init="random", run_id="b"),
            outcome(tmp_path / "c" / "summary.json", Failed(message="nproc: bad"), scenario="moe", init="pretrained",
                    run_id="c")]
    assert [r.failure_class for r in rows] == [None, "numerics", "infrastructure"]
    assert rows[0].flagged == 1 and rows[1].flagged == 0  # a numerics finding fails, it is not "flagged"
    markdown = suite_markdown("cpu", rows)
    assert markdown.startswith("# nightly on cpu: 1 of 3 passed")
    assert "| moe | random | fail | numerics | 11.9400 | fail | 0 | b |" in markdown
    assert "| native | random | pass |  | 11.9400 | - | 1 | a |" in markdown  # no curve finding: none to show
    assert "- **moe / random** loss curve, fail: step 2 ..." in markdown
    assert "**moe / random** (numerics): loss curve regression" in markdown
    assert "- **native / random** performance, tokens_per_s: 1 of 2: -33 %" in markdown


def test_the_second_slow_run_in_a_row_is_a_performance_failure_in_the_report(tmp_path):
    """A run whose loss held and whose only failed finding is a performance one (2 of 2) fails with class
    performance; its flag line says the count."""
    from prefect.states import Failed

    from titanflow.record.summary import RunSummary, classify
    from titanflow.report.nightly import outcome, suite_markdown
    from titanflow.results import Finding, LossVerdict

    loss = LossVerdict(first_step_loss=11.94, expected_first_step_loss=11.944, tolerance=0.15,
                       expectation_source="derived", verdict="pass", reason="|11.9400 - 11.9440| = 0.0040 <= 0.15")
    slow = Finding(metric="tokens_per_s", value=40.0, baseline=260.0, margin=0.05, passed=False, status="fail",
                   finding_class="performance", detail="40 vs node baseline 260 (-84.6%)", streak="2 of 2")
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    summary = RunSummary(run_id="s", scenario="native", target="cpu", init="random", steps=3, loss=loss,
                         findings=[slow], verdict="fail", reason="performance regression: tokens_per_s ...")
    path.write_text(summary.model_dump_json())
    assert classify(summary) == "performance"
    row = outcome(path, Failed(), scenario="native", init="random", run_id="s")
    assert (row.failure_class, row.flagged) == ("performance", 0)
    markdown = suite_markdown("cpu", [row])
    assert "| native | random | fail | performance | 11.9400 | - | 0 | s |" in markdown
    assert "- **native / random** performance, tokens_per_s: 2 of 2: 40 vs node baseline 260 (-84.6%)" in markdown
    # the loss out of its band as well: numerics, whatever the performance finding says
    off = summary.model_copy(update={"loss": loss.model_copy(update={"verdict": "fail"})})
    assert classify(off) == "numerics"


@pytest.mark.fault
def test_a_cancelled_run_is_counted_apart_from_the_failed_ones(tmp_path):
    import signal

    from prefect.exceptions import TerminationSignal
    from prefect.states import Cancelled, Failed

    from titanflow.record.summary import RunSummary
    from titanflow.report.nightly import SuiteRow, outcome, suite_markdown, suite_state
    from titanflow.run.recorder import RunRecorder
    from titanflow.tasks.train import train

    # a run cancelled in train after 2 logged steps (losses of tests/fixtures/run_folders/native-cpu-nan/metrics.csv)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "metrics.csv").write_text("step,loss,grad_norm,memory_gib,tps\n1,11.94006,0.8053,0.96,72.0\n"
                                                "2,11.93121,,0.97,195.0\n")
    record = RunRecorder(tmp_path / "c", RunSummary(run_id="c", scenario="moe", target="cpu", init="random", steps=9))
    with pytest.raises(TerminationSignal), record.task(train):
        raise TerminationSignal(signal.SIGTERM)
    cancelled = outcome(record.write(), Cancelled(), scenario="moe", init="random", run_id="c")
    assert (cancelled.verdict, cancelled.failure_class) == ("cancelled", None)
    assert cancelled.reason.endswith("in train after 2 logged step(s)")
    # cancelled before writing a summary: its state says so
    early = outcome(tmp_path / "d" / "summary.json", Cancelled(message="Flow run was cancelled."), scenario="moe",
                    init="pretrained", run_id="d")
    assert (early.verdict, early.failure_class) == ("cancelled", None)
    refused = outcome(tmp_path / "e" / "summary.json", Failed(message="nproc: bad"), scenario="hf_backend",
                      init="random", run_id="e")
    rows = [cancelled, early,
            SuiteRow(scenario="native", init="random", run_id="p", verdict="pass", failure_class=None, reason="",
                     flagged=0, history_error=None)]
    markdown = suite_markdown("cpu", rows)
    assert markdown.startswith("# nightly on cpu: 1 of 3 passed, 0 failed, 2 cancelled\n")
    assert "| moe | random | cancelled |  | - | - | 0 | c |" in markdown
    assert "- **moe / random** cancelled, not failed: cancelled (SIGTERM" in markdown
    state = suite_state(rows)
    assert state.is_cancelled() and state.message == "1 of 3 scenario runs passed; 2 cancelled; 0 regressions flagged"
    failed = suite_state([*rows, refused])
    assert failed.is_failed()
    assert failed.message == "1 of 4 scenario runs failed (infrastructure); 2 cancelled; 0 flagged"
    assert suite_state(rows[2:]).is_completed()
