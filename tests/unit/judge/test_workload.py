"""titanflow.judge.workload: the workload key runs are compared by, and the warm-up a run trained with."""

from titanflow.judge.workload import config_key, warmup_steps_of


def test_config_key_follows_the_workload_not_the_numerics_knobs():
    base = {"steps": 10, "lr": 8e-4, "seed": 0, "run_id": "a", "runs_dir": "/x", "timeout_s": 1800}
    assert config_key(base) == config_key(base | {"run_id": "b", "runs_dir": "/y", "timeout_s": 9})
    # a changed learning rate or seed must still be judged against the same golden curve
    assert config_key(base) == config_key(base | {"lr": 1e-3, "seed": 1})
    assert config_key(base) != config_key(base | {"steps": 3})
    assert config_key(base) != config_key(base | {"global_batch_size": 8})


def test_the_warm_up_is_as_given_else_the_default_for_the_steps():
    # the default, min(2, steps) (titanflow.params.resolved_warmup_steps), is what the goldens were recorded with
    assert [warmup_steps_of({"steps": n}) for n in (1, 2, 10)] == [1, 2, 2]
    assert warmup_steps_of({"steps": 10, "warmup_steps": 5}) == 5 and warmup_steps_of({"steps": 10,
                                                                                        "warmup_steps": 0}) == 0


def test_the_walkthrough_mode_and_another_attention_are_other_workloads_and_a_rope_kernel_is_not():
    """A walkthrough-mode run and a run that asks for the other attention (the packed row against the document mask:
    benchmarks/attention_modes.py measured curves up to 0.40 nats apart) compare only with runs of their own kind;
    asking for the attention the mode takes anyway, or for another rope implementation, changes nothing. The key of a
    default run is the one the goldens were recorded with before runs had a mode (native-cpu-random.curve.csv)."""
    from titanflow.judge.goldens import curve_path, read_curve

    base = {"scenario": "native", "target": "cpu", "steps": 10, "compile": False}  # a default run, as recorded
    assert config_key(base) == read_curve(curve_path("native", "cpu", "random")).config_key
    walkthrough = base | {"model_spec": "walkthrough"}
    assert config_key(walkthrough) != config_key(base)
    assert config_key(walkthrough) == read_curve(curve_path("native", "cpu", "random", model_spec="walkthrough")).config_key
    assert config_key(base | {"kernels": {"attention": "causal"}}) not in (config_key(base), config_key(walkthrough))
    assert config_key(base | {"kernels": {"attention": "sdpa"}}) == config_key(base)  # cpu's own
    assert config_key(walkthrough | {"kernels": {"attention": "causal"}}) == config_key(walkthrough)  # the mode's own
    assert config_key(walkthrough | {"kernels": {"attention": "sdpa"}}) != config_key(walkthrough)
    assert config_key(base | {"kernels": {"rope": "cpu"}}) == config_key(base)
