"""The check a multi-node e2e makes of its native cpu run: the golden workload's curve, recorded on 1 node x 2 ranks
(goldens/loss_curves/native-cpu-random.curve.csv), step for step."""

from __future__ import annotations


def assert_golden_curve_of_one_node(summary, layout: str, wall_s: float, steps: int) -> None:
    """Print ``summary``'s curve beside the golden's (``layout`` names the run's, e.g. "two pods x 1 rank"); assert
    it equals the golden's first ``steps`` at torchtitan's 5 decimals where the numerics are the golden's (else the
    flow's own band applies), and that the flow's own losses finding passed over all ``steps`` (the golden's workload:
    its key, or its leading steps, titanflow.judge.goldens.GoldenCurve.shared_steps)."""
    from titanflow.judge.environment import environment_key
    from titanflow.judge.goldens import curve_path, read_curve

    golden = read_curve(curve_path("native", "cpu", "random"))
    curve = [f"{loss:.5f}" for loss in summary.losses]
    print(f"\n{layout}, {steps} steps, wall {wall_s:.1f} s (train {summary.train.wall_s:.1f} s):\n"
          + "\n".join(f"  step {s}: 2x1 {curve[s - 1]}  golden 1x2 {golden.losses[s]:.5f}" for s in range(1, steps + 1)))
    if golden.same_numerics(environment_key(summary.environment), None):
        assert curve == [f"{golden.losses[s]:.5f}" for s in range(1, steps + 1)]
    else:
        print(f"numerics other than the golden's ({golden.environment}); held to golden_curve's band")
    (finding,) = [f for f in summary.findings if f.metric == "losses"]
    assert finding.status == "pass", finding.detail  # the flow judged it against the golden: the same workload
    assert f"worst of {steps} steps" in finding.detail
