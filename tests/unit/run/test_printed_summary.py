"""The summary ``titanflow run`` prints: what summary.json says of the export's parity and of a retried training,
shown, not only kept in the file. The run is ``tests/fixtures/legacy_run`` (a real native cpu run: KL 0.0, top-1
1.0 over 37 probe tokens), with a training of three launches and an MoE's router agreement set on it."""

import re

from helpers import FIXTURES

from titanflow.cli import print_summary
from titanflow.record.summary import read_summary
from titanflow.results import TrainResult


def _legacy(**train):
    summary = read_summary(FIXTURES / "legacy_run" / "summary.json")
    summary.train = TrainResult(log_path=None, metrics_path=None, losses=[11.94], tokens_per_s=1000.0,
                                peak_memory_gib=0.5, peak_rss_bytes=2**30, wall_s=10.0, **train)
    return summary


def test_parity_and_router_agreement_are_printed(capsys):
    summary = _legacy()
    print_summary(summary)
    assert re.search(r"\nparity +KL 0\.00e\+00 nats/token, top-1 agreement 1\.0000 over 37 tokens\n",
                     capsys.readouterr().out)
    summary.validation.parity.router_agreement = 0.9583
    print_summary(summary)
    assert "over 37 tokens, router agreement 0.9583\n" in capsys.readouterr().out


def test_training_figures_say_what_they_cover(capsys):
    """tokens/s is every rank's together (TrainResult.tokens_per_s: per-rank median x world size), twice what each
    rank's own step lines show on the cpu target's 2 ranks; the peak RSS is the launch's largest process."""
    print_summary(_legacy())
    printed = capsys.readouterr().out
    assert re.search(r"\ntokens/s +1000 \(all ranks\)\n", printed)
    assert re.search(r"\npeak RSS +1\.00 GiB \(the launch's largest process\)\n", printed)


def test_a_retried_training_says_how_many_launches_it_took(capsys):
    print_summary(_legacy(attempts=3))
    assert re.search(r"\ntraining launches +3 \(retried or resumed", capsys.readouterr().out)
    for attempts in (1, None):  # one launch, or a summary written before launches were counted: nothing to say
        print_summary(_legacy(attempts=attempts))
        assert "training launches" not in capsys.readouterr().out


def test_a_resumed_run_says_the_step_it_went_on_from_as_the_flow_log_does(capsys):
    import datetime

    from titanflow.record.summary import Continuation

    summary = _legacy()
    for from_step, said in ((None, "1 (no complete step checkpoint)"), (6, "6")):  # "step 0" before, for None
        summary.resumed = [Continuation(flow_run_id="f-2", previous_flow_run_id="f-1", previous_verdict="cancelled",
                                        from_step=from_step, at=datetime.datetime.now(datetime.UTC))]
        print_summary(summary)
        assert re.search(rf"\nresumed +1 time\(s\), last from step {re.escape(said)}\n", capsys.readouterr().out)


def test_a_failed_run_says_its_folder_and_its_failure_class_as_the_history_records_it(capsys):
    """tests/fixtures/run_folders/native-cpu-nan: a real native cpu run at lr 1e6 whose ranks raised on a NaN loss
    (torchrun exited 1); its class is numerics, by its losses, for the printed summary and the history row alike."""
    from titanflow.record.history import row_from_summary

    run_dir = FIXTURES / "run_folders" / "native-cpu-nan"
    summary = read_summary(run_dir / "summary.json")
    print_summary(summary, run_dir)
    printed = capsys.readouterr().out
    assert re.search(r"\nfailure class +numerics\n", printed)
    assert re.search(rf"^run +native-nan2\nfolder +{re.escape(str(run_dir))}\nverdict +fail\n", printed)
    assert row_from_summary(run_dir / "summary.json").failure_class == "numerics"
    print_summary(_legacy(), FIXTURES / "legacy_run")  # a run that passed: no class
    assert "failure class" not in capsys.readouterr().out


def test_a_failed_training_is_said_by_its_cause_fix_and_logs_never_by_its_tracebacks(capsys):
    """native-cpu-nan's error (summary.json) carries torch elastic's ChildFailedError block and a rank's traceback;
    the printed summary says the launch's exception, the numerics class's fix and the run's log files."""
    from titanflow.record.failure_text import FIXES

    run_dir = FIXTURES / "run_folders" / "native-cpu-nan"
    summary = read_summary(run_dir / "summary.json")
    assert "Traceback" in summary.error and "Root Cause (first observed failure)" in summary.error
    print_summary(summary, run_dir)
    printed = capsys.readouterr().out
    assert re.search(r"\ncause +train: torchrun exited 1; RuntimeError: Loss is not finite \(global_avg_loss=nan\) at "
                     r"step 3\. Stopping training\.\n", printed)
    assert re.search(rf"\nfix +{re.escape(FIXES['numerics'])}\n", printed)
    assert re.search(rf"\nlogs +{re.escape(str(run_dir / 'train.log'))}, {re.escape(str(run_dir / 'summary.json'))}\n",
                     printed)
    assert "Traceback" not in printed and "Root Cause" not in printed and "error_file" not in printed


def test_where_the_expectation_came_from_and_what_the_curve_was_judged_against_are_printed(capsys):
    """The first step's expectation source, the golden_curve rule's finding (here: no baseline, with the promote
    command titanflow.judge.regression words it) and a performance finding out of margin with its count."""
    from titanflow.results import Finding

    summary = _legacy()
    summary.findings = [
        Finding(metric="losses", value=None, baseline=None, margin=0.02, passed=None, status="no baseline",
                finding_class="numerics",
                detail="the goldens are of the embedded weights; this run trained /w and no baseline on this node; "
                       "make this run the baseline of its workload on this node: titanflow golden promote r1"),
        Finding(metric="tokens_per_s", value=40.0, baseline=260.0, margin=0.05, passed=False, status="flagged",
                finding_class="performance", detail="40 vs node baseline 260 (-84.6%)", streak="1 of 2"),
        Finding(metric="peak_memory_gib", value=1.0, baseline=1.0, margin=0.1, passed=True, status="pass",
                finding_class="performance", detail="within")]
    print_summary(summary)
    printed = capsys.readouterr().out
    assert re.search(rf"\nexpected from +{re.escape(summary.loss.expectation_source)}\n", printed)
    assert re.search(r"\nloss curve +no baseline: .* titanflow golden promote r1\n", printed)
    assert re.search(r"\nperformance +tokens_per_s flagged 1 of 2: 40 vs node baseline 260 \(-84\.6%\)\n", printed)
    assert "peak_memory_gib" not in printed  # a finding within its margin is in summary.json, not on the screen
