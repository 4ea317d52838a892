"""Logits of the trained torchtitan model on a fixed batch, saved for the export's parity check.

Inside torchrun, after the last training step and before torchtitan's trainer
closes, every rank runs one forward pass of the trained model on
:data:`PROBE_TEXT` (FSDP needs all ranks), the way the trainer itself calls the
model (``post_dataloading_process`` builds positions and attention masks), with
the lm_head applied. The ids are padded to a training batch's shape
(:func:`probe_batch`), so whatever training compiled for its shape (flex
attention's block-mask builder, a compiled model) is reused rather than traced
again for a new one (1.2 s per rank for the builder on the cpu target before it
ran eagerly there, benchmarks/launch_phases.py); attention is causal, so the
padding after the probe's tokens changes none of their logits. Rank 0 writes
``<dump_folder>/probe_logits.pt``:
``{"input_ids": [1, L] int64, "logits": [1, L, vocab] float32}``, and for an MoE
``"router_topk": [moe layers, L, top_k] int64``, each token's chosen experts per
layer in ascending order. The validate task runs the exported model in
transformers on the same ids and compares.

An MoE trained with expert-bias load balancing (``load_balance_coeff``, the walkthrough mode) routes with a
per-expert bias that a Hugging Face Qwen3-MoE checkpoint has no tensor for, so its export routes without it.
Then the probe runs a second forward with the bias set aside: ``logits`` and ``router_topk`` are those (what the
export must reproduce), and ``router_topk_with_expert_bias`` [moe layers, L, top_k] keeps the trained model's own
routing, so the report says how much of it the export gives up.

It also saves ``<dump_folder>/untied_lm_head.safetensors`` when the trained
model's lm_head is no longer the embedding although the checkpoint was tied:
torchtitan's transformers backend unties them "for FSDP compatibility" and
trains both, while its HF save writes the embedding only. The export task adds
that head back, so the exported model is the trained one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from titan_cfg import forms

#: Real text, long enough for a few dozen tokens; the ids come from the run's own tokenizer.
PROBE_TEXT = (
    "Ever since I was a child, my inborn recklessness has brought me nothing but trouble. "
    "Once, in my school days, I jumped from the second story of the school building."
)
PROBE_FILE = "probe_logits.pt"
UNTIED_HEAD_FILE = "untied_lm_head.safetensors"


def probe_ids(tokenizer_dir: Path, tokenizer=None):
    """[1, L] int64 tensor: the ids of :data:`PROBE_TEXT` (no special tokens) from ``tokenizer`` (a
    ``tokenizers.Tokenizer`` already loaded from ``tokenizer_dir``) or else from ``tokenizer_dir/tokenizer.json``."""
    import torch
    from tokenizers import Tokenizer

    if tokenizer is None:
        tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    return torch.tensor([tokenizer.encode(PROBE_TEXT, add_special_tokens=False).ids], dtype=torch.int64)


def probe_batch(ids_1L, batch: int, seq_len: int):
    """(input ids [batch, S], positions [batch, S]) for the forward pass: every row is ``ids_1L`` ([1, L] int64)
    followed by zeros, S = max(L, ``seq_len``), positions 0..S-1 (one document), all contiguous, as a training
    batch of ``batch`` x ``seq_len`` is. The probe's logits are the first row's first L positions."""
    import torch

    length = ids_1L.shape[1]
    width = max(length, seq_len)
    inputs = torch.zeros((batch, width), dtype=ids_1L.dtype, device=ids_1L.device)
    inputs[:, :length] = ids_1L
    positions = torch.arange(width, device=ids_1L.device).repeat(batch, 1)
    return inputs, positions


def trainer_tokenizer(trainer, tokenizer_dir: Path):
    """The ``tokenizers.Tokenizer`` the trainer loaded, when torchtitan's HuggingFaceTokenizer read it from
    ``tokenizer_dir`` (saves loading tokenizer.json again: 0.9 s per rank for Qwen3's); None otherwise."""
    from tokenizers import Tokenizer

    loaded = getattr(trainer, "tokenizer", None)
    inner = getattr(loaded, "tokenizer", None)
    same_folder = Path(getattr(loaded, "tokenizer_path", "")).resolve() == Path(tokenizer_dir).resolve()
    return inner if isinstance(inner, Tokenizer) and same_folder else None


def save_probe_logits(trainer, tokenizer_dir: Path, out_path: Path, tied_checkpoint: bool) -> None:
    """Forward the trained model on the probe batch (all ranks); rank 0 saves ids and logits,
    and the lm_head when training untied a ``tied_checkpoint`` (module docstring)."""
    import torch

    with torch.no_grad():
        _save_probe_logits(trainer, tokenizer_dir, out_path, tied_checkpoint)


def _save_probe_logits(trainer, tokenizer_dir: Path, out_path: Path, tied_checkpoint: bool) -> None:
    import torch

    model = trainer.model_parts[0]
    ids = probe_ids(tokenizer_dir, trainer_tokenizer(trainer, tokenizer_dir)).to(trainer.device)
    length = ids.shape[1]
    training = trainer.config.training
    batch_ids, positions = probe_batch(ids, forms.local_batch_size(training), forms.seq_len(training))
    if forms.token_major():  # the model takes a microbatch as one token row [T] (from 2026-08-20)
        batch_ids, positions = batch_ids.reshape(-1), positions.reshape(-1)
    inputs, extra = forms.model_inputs(trainer, {"input": batch_ids, "positions": positions}, batch_ids)
    skip_lm_head = getattr(model, "_skip_lm_head", False)
    model._skip_lm_head = False  # chunked losses apply lm_head inside the loss; the probe needs logits
    biased = _expert_bias_modules(model)
    biased_routes = None
    try:
        if biased:  # the trained routing first, then the forward the export must reproduce (module docstring)
            biased_routes = _forward_routes(model, inputs, extra, length)[1]
        with _without_expert_bias(biased):
            logits, routes = _forward_routes(model, inputs, extra, length)
    finally:
        model._skip_lm_head = skip_lm_head
    head, embedding = model.lm_head, model.tok_embeddings
    untied_head = None
    if head is not None and embedding is not None and head.weight is not embedding.weight and tied_checkpoint:
        untied_head = head.weight.full_tensor() if hasattr(head.weight, "full_tensor") else head.weight
    if int(os.environ.get("RANK", "0")) == 0:
        probe = {"input_ids": ids.cpu(), "logits": logits}
        if routes:
            probe["router_topk"] = torch.stack(routes)
        if biased_routes:
            probe["router_topk_with_expert_bias"] = torch.stack(biased_routes)
        torch.save(probe, out_path)
        if untied_head is not None:
            from safetensors.torch import save_file

            save_file({"lm_head.weight": untied_head.detach().float().cpu().contiguous()},
                      out_path.with_name(UNTIED_HEAD_FILE))


def _forward_routes(model, inputs, extra: dict, length: int):
    """One forward of the probe batch: (row 0's logits [1, length, vocab] float32, each MoE layer's routes)."""
    routes, hooks = _record_routes(model, length)
    try:
        logits = model(inputs, **extra)
    finally:
        for hook in hooks:
            hook.remove()
    if hasattr(logits, "full_tensor"):
        logits = logits.full_tensor()
    if logits.dim() == 2:  # a token-major model's [T, vocab] (from 2026-08-20): row 0 starts the token row
        logits = logits[None]
    return first_row_logits(logits, length), routes


def _expert_bias_modules(model) -> list:
    """The modules of ``model`` that route with a load-balancing bias (torchtitan's MoE ``expert_bias_E`` buffer,
    present when ``load_balance_coeff`` is set)."""
    return [m for m in model.modules() if getattr(m, "expert_bias_E", None) is not None]


@contextlib.contextmanager
def _without_expert_bias(modules: list):
    """Within the block, every module of ``modules`` routes without its ``expert_bias_E`` (set to None, as
    torchtitan's MoE has it without load balancing); the buffers are put back after."""
    kept = [m.expert_bias_E for m in modules]
    for m in modules:
        m.expert_bias_E = None
    try:
        yield
    finally:
        for m, bias in zip(modules, kept):
            m.expert_bias_E = bias


def first_row_logits(logits, length: int):
    """Row 0's first ``length`` positions of a probe batch's logits ``[local_batch, seq_len, vocab]``, as float32 on
    the CPU in storage of their own: ``[1, length, vocab]``. A slice shares the whole batch's storage, which
    ``torch.save`` writes whole: 2 x 256 x 151936 float32 is 311 MB for the 22 MB of a 37-token probe."""
    return logits[:1, :length].float().cpu().clone()


def _record_routes(model, length: int) -> tuple[list, list]:
    """Forward hooks on every torchtitan MoE router of ``model`` (in layer order), appending each
    call's top-k expert ids of batch row 0's first ``length`` tokens, sorted: [length, top_k]. Returns (that
    list, the hook handles)."""
    from torchtitan.models.common.moe import TokenChoiceTopKRouter

    routes: list = []

    def record(_module, _inputs, output):
        topk_expert_ids_BLK = output[1]
        if hasattr(topk_expert_ids_BLK, "full_tensor"):
            topk_expert_ids_BLK = topk_expert_ids_BLK.full_tensor()
        # a token-major model's router gives [T, top_k] (from 2026-08-20): row 0 starts the token row
        row0 = topk_expert_ids_BLK[0] if topk_expert_ids_BLK.dim() == 3 else topk_expert_ids_BLK
        routes.append(row0[:length].sort(dim=-1).values.cpu())

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, TokenChoiceTopKRouter)]
    return routes, hooks


#: What torchtitan 0.3.0's ``Trainer.train`` ends with on rank 0: ``time.sleep(2)`` "for other ranks to complete".
RANK_ZERO_SLEEP = "time.sleep(2)"
#: The line torchtitan logs before that sleep; with the sleep taken out it would say what no longer happens.
RANK_ZERO_SLEEP_MESSAGE = "Sleeping 2 seconds for other ranks to complete"


def rank_zero_sleep_still_there() -> bool:
    """True while torchtitan's ``Trainer.train`` sleeps on rank 0 after the last step (:data:`RANK_ZERO_SLEEP`)."""
    import inspect

    from torchtitan.trainer import Trainer

    return RANK_ZERO_SLEEP in inspect.getsource(Trainer.train)


class _TimeWithoutSleep:
    """``torchtitan.trainer``'s ``time`` module with ``sleep`` doing nothing (:func:`install`)."""

    def __getattr__(self, name):
        import time

        return getattr(time, name)

    @staticmethod
    def sleep(_seconds: float) -> None:
        return None


def _not_the_sleep_message(record) -> bool:
    """A ``logging`` filter: False for torchtitan's :data:`RANK_ZERO_SLEEP_MESSAGE` record, True for any other."""
    return record.getMessage() != RANK_ZERO_SLEEP_MESSAGE


def install(tokenizer_dir: Path, dump_folder: Path, tied_checkpoint: bool) -> None:
    """Make torchtitan's ``Trainer.train`` save the probe logits after training (this process only).

    It also takes out rank 0's 2 s sleep at the end of ``Trainer.train`` (:data:`RANK_ZERO_SLEEP`), a wait for
    the other ranks to finish before rank 0 goes on to close: the probe's forward pass that follows is
    a collective of every rank (FSDP's all-gathers), so the ranks meet there instead. ``time.sleep`` is that
    module's only call of ``sleep`` (``tests/unit/titan_cfg/test_probe.py`` checks both), and the line torchtitan
    logs before it (:data:`RANK_ZERO_SLEEP_MESSAGE`) is left out of the log, which would otherwise say it slept.
    """
    import torchtitan.trainer
    from torchtitan.trainer import Trainer

    upstream_train = Trainer.train
    torchtitan.trainer.time = _TimeWithoutSleep()
    torchtitan.trainer.logger.addFilter(_not_the_sleep_message)

    def train_then_probe(self, *args, **kwargs):
        result = upstream_train(self, *args, **kwargs)
        save_probe_logits(self, tokenizer_dir, dump_folder / PROBE_FILE, tied_checkpoint)
        return result

    Trainer.train = train_then_probe
