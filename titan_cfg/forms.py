"""The form each adapted change of the torchtitan window takes in this install (titan_cfg.window: the changes, their
dates, and which are adapted): the rank side and the renders build these parts of a config only through here.

Each function asks the install for the newer form and takes the older one where it is missing; the window's tests
(tests/upstream/) build every scenario's config on each checked point of the window with them.
"""

from __future__ import annotations

import dataclasses
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


def text_loader(dataset_path: str) -> Any:
    """torchtitan's data loader config for the job's local dataset folder ``dataset_path`` (``load_dataset(path,
    split="train")``, each document's ``text``).

    Before 2026-08-19 (#4088, ``grain``): ``HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path=...)``,
    "c4_test" naming upstream's loader for that layout. From it the text loader is gone: titan_cfg.grain_loader's
    ``GrainDataLoader.Config``, which yields the same rows (titan_cfg.token_rows).
    """
    if window.change("grain").probe():
        return _grain_loader().text_loader(dataset_path)
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader

    return HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path=dataset_path)


def packed_row_loader(config: Any) -> Any:
    """``config`` (:func:`text_loader`'s) as the packed row's loader: every row one sequence over positions 0..L-1
    (titan_cfg.packed_row before 2026-08-19, #4088 ``grain``; titan_cfg.grain_loader's ``packed_row`` collator from
    it).

    Raises:
        TypeError: ``config`` is not :func:`text_loader`'s form (another loader's rows are not titanflow's).
    """
    if window.change("grain").probe():
        return _grain_loader().packed_row_loader(config)
    from titan_cfg import packed_row  # lazy: torchtitan (its text loader, which a Grain base lacks)

    return packed_row.loader_config(config)


def _grain_loader():
    """titan_cfg.grain_loader, imported on a Grain base only (it builds on torchtitan's Grain modules)."""
    from titan_cfg import grain_loader  # lazy: torchtitan (its Grain modules, which a base before 2026-08-19 lacks)

    return grain_loader


def token_major() -> bool:
    """Whether this install counts the batch in tokens and its model takes a microbatch token-major (``[T]``, no batch
    dimension): from 2026-08-20 (#4121, ``token_batching``)."""
    return window.change("token_batching").probe()


def set_batch(training: Any, *, local_batch_size: int, global_batch_size: int, seq_len: int, **fields: Any) -> Any:
    """torchtitan's training config ``training`` with the batch of a job: ``local_batch_size`` rows of ``seq_len``
    tokens per rank and microbatch, ``global_batch_size`` rows per step (-1: one microbatch per rank), and the other
    ``fields`` as they are named.

    Before 2026-08-20 (#4121, ``token_batching``) in rows: ``local_batch_size``, ``global_batch_size``, ``seq_len``;
    from it in tokens: ``num_tokens_per_microbatch_per_dp_rank = local_batch_size * seq_len``,
    ``num_tokens_per_train_step = global_batch_size * seq_len`` (-1 as it is: the same default) and
    ``max_context_length = seq_len`` (the rows the collator cuts: titan_cfg.grain_loader).
    """
    if token_major():
        return dataclasses.replace(training, num_tokens_per_microbatch_per_dp_rank=local_batch_size * seq_len,
                                   num_tokens_per_train_step=global_batch_size * seq_len if global_batch_size > 0
                                   else -1, max_context_length=seq_len, **fields)
    return dataclasses.replace(training, local_batch_size=local_batch_size, global_batch_size=global_batch_size,
                               seq_len=seq_len, **fields)


def seq_len(training: Any) -> int:
    """The tokens per row (sequence) of torchtitan's training config ``training``: ``seq_len``, or from 2026-08-20
    (#4121, ``token_batching``) ``max_context_length`` (titanflow's rows: :func:`set_batch`)."""
    return training.max_context_length if token_major() else training.seq_len


def local_batch_size(training: Any) -> int:
    """The rows per rank and microbatch of torchtitan's training config ``training``: ``local_batch_size``, or from
    2026-08-20 (#4121, ``token_batching``) its tokens per microbatch over :func:`seq_len`."""
    if token_major():
        return training.num_tokens_per_microbatch_per_dp_rank // training.max_context_length
    return training.local_batch_size


def rope_length(tokens: int) -> dict[str, int]:
    """The keyword of torchtitan's ``CosSinRoPE.Config`` that sets its cache length to ``tokens``: ``max_seq_len``,
    or ``max_context_length`` on a base that names it so (a token-batching base: 2026-08-21's, with #4121's
    ``training.max_context_length``)."""
    from torchtitan.models.common.rope import CosSinRoPE

    names = {f.name for f in dataclasses.fields(CosSinRoPE.Config)}
    return {"max_seq_len" if "max_seq_len" in names else "max_context_length": tokens}
