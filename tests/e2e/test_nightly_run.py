"""The qwen3-nightly suite end to end: a planted learning-rate regression fails the suite as numerics."""


def test_nightly_fails_a_planted_learning_rate_regression_as_numerics(nightly_planted_lr):
    """lr 1.6e-3 instead of 8e-4 (tests/e2e/conftest.py ``nightly_planted_lr``): step 1 does not depend on lr, so the
    first-step check still passes, but the later steps leave the native random-init golden curve (measured: 0.06
    nats off at step 3, 0.30 at step 10, against a 0.02 margin). The suite ends Failed, the run is numerics."""
    from titanflow.record.history import read_history
    from titanflow.record.summary import read_summary

    proc, runs_dir = nightly_planted_lr
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Failed: 1 of 1 scenario runs failed (numerics)" in proc.stdout
    (summary_path,) = runs_dir.glob("*/summary.json")
    summary = read_summary(summary_path)
    assert summary.verdict == "fail" and summary.failed_task is None
    assert abs(summary.loss.first_step_loss - summary.loss.expected_first_step_loss) <= summary.loss.tolerance
    assert summary.reason.startswith("loss curve regression")
    (curve,) = [f for f in summary.regressions if f.metric == "losses"]
    assert curve.finding_class == "numerics" and abs(curve.value - curve.baseline) > 0.02
    row = read_history(scenario="native").set_index("run_id").loc[summary.run_id]
    assert (row["verdict"], row["failure_class"]) == ("fail", "numerics")
    assert row["reason"].startswith("loss curve regression")
