"""titan_cfg.lr_schedule against torchtitan's own scheduler, and the shared-prefix figures the golden_curve rule uses
for a run shorter than its golden (titanflow.judge.goldens)."""

from __future__ import annotations

import json

import pytest

from titan_cfg.lr_schedule import lr_factors, shared_loss_steps
from titanflow.judge.goldens import RENDER_DIR


def _torchtitan_factors(steps: int, warmup_steps: int, scheduler: dict) -> list[float]:
    """The lr factor torchtitan's LRSchedulersContainer gives each training step (the lr an update uses, over
    an optimizer of lr 1), built from a rendered ``lr_scheduler`` section."""
    import torch
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

    config = LRSchedulersContainer.Config(warmup_steps=warmup_steps, decay_ratio=scheduler["decay_ratio"],
                                          decay_type=scheduler["decay_type"], min_lr_factor=scheduler["min_lr_factor"])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    container = config.build(optimizers=[optimizer], training_steps=steps)
    factors = []
    for _ in range(steps):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        container.step()
    return factors


@pytest.mark.parametrize("render", ["native-trn2-random.json", "moe-trn2-pretrained.json"])
def test_the_factors_are_torchtitans_for_the_scheduler_the_renders_leave(render):
    scheduler = json.loads((RENDER_DIR / render).read_text())["trainer_config.json"]["lr_scheduler"]
    # the render leaves every setting but the warm-up at torchtitan's default, which this module mirrors
    assert (scheduler["decay_ratio"], scheduler["decay_type"], scheduler["min_lr_factor"]) == (None, "linear", 0.0)
    for steps in (1, 2, 3, 4, 5, 10, 17):
        for warmup in sorted({0, 1, 2, min(2, steps), steps, steps + 3}):
            assert lr_factors(steps, warmup) == pytest.approx(_torchtitan_factors(steps, warmup, scheduler),
                                                              abs=1e-12), (steps, warmup)


def test_a_short_run_of_the_default_warm_up_shares_its_losses_with_the_ten_step_golden():
    # warm-up 2 (min(2, steps)): factors 0.5, 1, 1 (the stable step), then the decay, which depends on the step count
    assert lr_factors(10, 2)[:4] == [0.5, 1.0, 1.0, 0.875]
    assert lr_factors(4, 2) == [0.5, 1.0, 1.0, 0.5]
    assert [shared_loss_steps(n, min(2, n), 10, 2) for n in (1, 2, 3, 4, 5, 10)] == [1, 2, 3, 4, 4, 10]
    # a warm-up over all steps (a different schedule from the first update on): only the loss before any update
    assert shared_loss_steps(4, 4, 10, 10) == 1
    assert shared_loss_steps(10, 3, 10, 2) == 1


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="steps 0"):
        lr_factors(0, 2)
