"""The form each adapted change of the torchtitan window takes in this install (titan_cfg.window: the changes, their
dates, and which are adapted): the rank side and the renders build these parts of a config only through here.

Each function asks the install for the newer form and takes the older one where it is missing; the window's tests
(tests/upstream/) build every scenario's config on each checked point of the window with them.
"""

from __future__ import annotations

from typing import Any

from titan_cfg import window


def activation_checkpoint(mode: str) -> Any:
    """torchtitan's activation-checkpointing config for ``mode`` ("none", "full", "selective").

    From 2026-06-15 (#3674, window change ``ac_policies``): ``None``, ``FullAC.Config()`` or ``SelectiveAC.Config()``;
    before it: ``ActivationCheckpointConfig(mode=mode)`` (its ``"none"`` mode turns it off).

    Raises:
        KeyError: ``mode`` is none of the three.
    """
    if window.change("ac_policies").probe():
        from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

        return {"none": None, "full": FullAC.Config(), "selective": SelectiveAC.Config()}[mode]
    if mode not in ("none", "full", "selective"):
        raise KeyError(mode)
    from torchtitan.config import ActivationCheckpointConfig

    return ActivationCheckpointConfig(mode=mode)


def set_loss_vocab_size(loss_config: Any, vocab_size: int) -> None:
    """Tell the loss of a torchtitan config the vocabulary size (tokens) of the model it follows.

    From 2026-06-26 (#3779, ``chunked_loss_wrapper``) the Qwen3 config functions' ``ChunkedLossWrapper.Config`` holds an
    inner ``loss_fn`` whose ``global_vocab_size`` the function sets for its own flavor; a spec swapped in must set it
    again. Before it the plain ``ChunkedCELoss.Config`` takes the size from the model's output layer: nothing to set.
    """
    inner = getattr(loss_config, "loss_fn", None)
    if inner is not None and hasattr(inner, "global_vocab_size"):
        inner.global_vocab_size = vocab_size


def spmd_backend(name: str) -> str:
    """``name`` (``parallelism.spmd_backend`` as torchtitan 0.3.0 spells it) as this install spells it.

    "partial_dtensor" (DTensor on model-parallel axes only) is called "default" before 2026-08-18 (#4085,
    ``partial_dtensor``); the other names are the same across the window.
    """
    if name == "partial_dtensor" and not window.change("partial_dtensor").probe():
        return "default"
    return name


def walkthrough_model_spec(flavor: str, attention: str) -> Any:
    """``model_registry(flavor, attn_backend=attention)``, as the walkthrough writes it, on a base that still accepts
    that backend; from 2026-06-09 (#3571, ``sdpa_refused``) ``model_registry(flavor)`` with upstream's default
    backend (the attention that runs is titanflow's kernel registry's either way: titan_cfg.kernels)."""
    from torchtitan.models.qwen3 import model_registry

    if attention == "sdpa" and window.change("sdpa_refused").probe():
        return model_registry(flavor)
    return model_registry(flavor, attn_backend=attention)


def bind_config_argv(argv: list[str]) -> None:
    """Have torchtitan's config parser read ``argv`` (the rank's command line, without the program).

    From 2026-06-20 (#3725, ``config_argv``) ``ConfigManager.parse_args`` reads ``sys.argv`` when it is called. Before
    it, its default is ``sys.argv[1:]`` as it was when torchtitan was imported: in a rank forked from
    titan_cfg.forked_torchrun, the launcher's own options, which the parser refuses. There the default is set to
    ``argv``; a later base is left alone.
    """
    from torchtitan.config.manager import ConfigManager

    if not window.change("config_argv").probe():
        ConfigManager.parse_args.__defaults__ = (list(argv),)


def unmasked(attention_config: Any) -> None:
    """Mark a torchtitan decoder layer's attention config as taking no document mask, where the install has a field
    for it: up to 2026-06-09 (#3571, ``sdpa_refused``, which deprecated SDPA and the mask type for language models)
    the config carries ``mask_type``, and an SDPA inner attention must have ``"causal"`` (``"block_causal"`` is
    refused when the config is built); later bases read the mask from the inner attention alone."""
    if hasattr(attention_config, "mask_type"):
        attention_config.mask_type = "causal"


def model_inputs(trainer: Any, input_dict: dict, labels: Any) -> tuple[Any, dict]:
    """``trainer.post_dataloading_process(input_dict, labels)`` as (the input ids [B, L], every keyword the model's
    forward takes: positions, attention masks, ...).

    From 2026-06-10 (#3371, ``post_dataloading_triple``) it returns (inputs, labels, extra); before it (inputs, labels,
    extra inputs, extra keywords), which the model's forward takes together.
    """
    processed = trainer.post_dataloading_process(input_dict, labels)
    if len(processed) == 4:
        inputs, _, extra_inputs, extra_kwargs = processed
        return inputs, {**extra_inputs, **extra_kwargs}
    inputs, _, extra = processed
    return inputs, extra
