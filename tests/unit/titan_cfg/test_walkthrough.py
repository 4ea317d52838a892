"""The walkthrough mode (each scenario record's ``walkthrough``, titan_cfg.scenarios) holds what the walkthrough's
torchtitan config functions set, read from the functions themselves; the packed row's loader yields torchtitan's
batches without positions."""

import importlib

import pytest

from titan_cfg.compat.cpu import make_importable_without_triton

make_importable_without_triton()

from titan_cfg.scenarios import SCENARIOS  # noqa: E402

AC_NAMES = {"FullAC": "full", "SelectiveAC": "selective"}


def _config_function(name: str):
    """The torchtitan config function ``module:function`` names (a :class:`titan_cfg.scenarios.Walkthrough`'s)."""
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_walkthrough_mode_is_what_the_scenarios_config_function_sets(scenario):
    """torchtitan 0.3.0's qwen3_32b(), qwen3_30b_a3b() and transformers_modeling_backend_full(): warm-up, export dtype
    and activation checkpointing as each function sets them; an MoE's load balancing is torchtitan's MoE default."""
    recipe = SCENARIOS[scenario].walkthrough
    config = _config_function(recipe.config_function)()
    assert recipe.warmup_steps == config.lr_scheduler.warmup_steps
    assert recipe.export_dtype == config.checkpoint.export_dtype
    assert recipe.activation_checkpoint == AC_NAMES[type(config.activation_checkpoint).__qualname__.split(".")[0]]
    if SCENARIOS[scenario].model_type == "qwen3_moe":
        import dataclasses

        from torchtitan.models.common.moe import MoE

        default = next(f.default for f in dataclasses.fields(MoE.Config) if f.name == "load_balance_coeff")
        assert recipe.load_balance_coeff == default == 1e-3
    else:
        assert recipe.load_balance_coeff is None


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_walkthrough_values_come_from_the_function_the_scenario_starts_from(scenario):
    """The function a scenario's walkthrough values are read from is the one its config function calls (native:
    qwen3_32b, moe: qwen3_30b_a3b, hf_backend: transformers_modeling_backend_full)."""
    import inspect

    module, function = SCENARIOS[scenario].walkthrough.config_function.split(":")
    source = inspect.getsource(SCENARIOS[scenario].build)
    assert f"from {module} import" in source and function in source


def test_the_packed_row_collate_drops_positions_and_keeps_tokens_and_labels():
    import torch

    from titan_cfg.packed_row import without_positions

    samples = [({"input": torch.arange(4), "positions": torch.tensor([0, 1, 0, 1])}, torch.arange(1, 5)),
               ({"input": torch.arange(4, 8), "positions": torch.tensor([0, 1, 2, 3])}, torch.arange(5, 9))]
    inputs, labels = without_positions(samples)
    assert set(inputs) == {"input"}
    assert torch.equal(inputs["input"], torch.arange(8).view(2, 4))
    assert torch.equal(labels, torch.arange(1, 9).view(2, 4))


def test_the_packed_row_loader_refuses_another_loader():
    from types import SimpleNamespace

    from titan_cfg.packed_row import loader_config

    with pytest.raises(TypeError, match="HuggingFaceTextDataLoader"):
        loader_config(SimpleNamespace())


def test_the_walkthrough_rope_is_the_4b_flavors():
    """titan_cfg.job's WALKTHROUGH_ROPE_THETA and WALKTHROUGH_CONTEXT are what model_registry("4B") builds."""
    from torchtitan.models.qwen3 import model_registry

    from titan_cfg.job import WALKTHROUGH_CONTEXT, WALKTHROUGH_ROPE_THETA

    rope = model_registry("4B").model.layers[0].attention.rope
    assert (rope.theta, rope.max_seq_len) == (WALKTHROUGH_ROPE_THETA, WALKTHROUGH_CONTEXT) == (1e6, 40960)
