"""The learning-rate schedule of a rendered job, as a pure function of its step counts.

titan_cfg.trainer_config leaves torchtitan's scheduler at its defaults but for the warm-up
(torchtitan.components.optimizer.lr_scheduler, 0.3.0: ``decay_ratio`` None, ``decay_type`` "linear",
``min_lr_factor`` 0): a linear warm-up over ``warmup_steps``, one stable step, then a linear decay over the
remaining ``steps - warmup_steps``. torchtitan builds that schedule only around a live optimizer (a closure
inside its container's constructor), so the pipeline side, which never imports torch, reads it here;
tests/unit/titan_cfg/test_lr_schedule.py holds this to torchtitan's own for many step counts.

What it answers: which leading losses two runs of one workload share when only their step counts differ.
The loss logged at step k is measured before update k, on weights that updates 1..k-1 made, so it is the
same in both runs while the factors of steps 1..k-1 are (a 4-step run and the 10-step golden run of the
default warm-up of 2 share all 4 losses).
"""

from __future__ import annotations


def lr_factors(steps: int, warmup_steps: int) -> list[float]:
    """The factor of the optimizer's learning rate at each training step 1..``steps`` (a list of ``steps`` floats).

    torchtitan's ``linear_warmup_stable_decay`` at current_step = step - 1: warm-up (current_step + 1) /
    warmup_steps, then 1.0 for one stable step, then 1 - (current_step + 1 - warmup - 1) / (steps - warmup).
    A warm-up longer than ``steps`` is capped to ``steps``, as torchtitan caps it.

    Raises:
        ValueError: ``steps`` below 1 or ``warmup_steps`` below 0.
    """
    if steps < 1 or warmup_steps < 0:
        raise ValueError(f"steps {steps}, warmup_steps {warmup_steps}: need steps >= 1 and warmup_steps >= 0")
    warmup = min(warmup_steps, steps)
    decay = steps - warmup
    stable_end = warmup + 1  # warm-up steps plus the one stable step torchtitan adds
    factors = []
    for current in range(steps):
        if current < warmup:
            factors.append((current + 1) / warmup)
        elif current < stable_end:
            factors.append(1.0)
        else:
            factors.append(1.0 - (current + 1 - stable_end) / decay)
    return factors


def shared_loss_steps(steps_a: int, warmup_a: int, steps_b: int, warmup_b: int) -> int:
    """How many leading losses two runs share that differ only in step count and warm-up: 1 (the loss before any
    update) plus the leading steps whose learning-rate factors are equal, at most the shorter run's steps."""
    a, b = lr_factors(steps_a, warmup_a), lr_factors(steps_b, warmup_b)
    equal = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return min(steps_a, steps_b, equal + 1)
