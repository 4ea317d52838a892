"""Logits of the trained torchtitan model on a fixed batch, saved for the export's parity check.

Inside torchrun, after the last training step and before torchtitan's trainer
closes, every rank runs one forward pass of the trained model on
:data:`PROBE_TEXT` (FSDP needs all ranks), the way the trainer itself calls the
model (``post_dataloading_process`` builds positions and attention masks), with
the lm_head applied; rank 0 writes ``<dump_folder>/probe_logits.pt``:
``{"input_ids": [1, L] int64, "logits": [1, L, vocab] float32}``, and for an MoE
``"router_topk": [moe layers, L, top_k] int64``, each token's chosen experts per
layer in ascending order. The validate task runs the exported model in
transformers on the same ids and compares.

It also saves ``<dump_folder>/untied_lm_head.safetensors`` when the trained
model's lm_head is no longer the embedding although the checkpoint was tied:
torchtitan's transformers backend unties them "for FSDP compatibility" and
trains both, while its HF save writes the embedding only. The export task adds
that head back, so the exported model is the trained one.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Real text, long enough for a few dozen tokens; the ids come from the run's own tokenizer.
PROBE_TEXT = (
    "Ever since I was a child, my inborn recklessness has brought me nothing but trouble. "
    "Once, in my school days, I jumped from the second story of the school building."
)
PROBE_FILE = "probe_logits.pt"
UNTIED_HEAD_FILE = "untied_lm_head.safetensors"


def probe_ids(tokenizer_dir: Path):
    """[1, L] int64 tensor: the ids of :data:`PROBE_TEXT` from ``tokenizer_dir/tokenizer.json`` (no special tokens)."""
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    return torch.tensor([tokenizer.encode(PROBE_TEXT, add_special_tokens=False).ids], dtype=torch.int64)


def save_probe_logits(trainer, tokenizer_dir: Path, out_path: Path, tied_checkpoint: bool) -> None:
    """Forward the trained model on the probe batch (all ranks); rank 0 saves ids and logits,
    and the lm_head when training untied a ``tied_checkpoint`` (module docstring)."""
    import torch

    with torch.no_grad():
        _save_probe_logits(trainer, tokenizer_dir, out_path, tied_checkpoint)


def _save_probe_logits(trainer, tokenizer_dir: Path, out_path: Path, tied_checkpoint: bool) -> None:
    import torch

    model = trainer.model_parts[0]
    ids = probe_ids(tokenizer_dir).to(trainer.device)
    positions = torch.arange(ids.shape[1], device=trainer.device)[None]
    inputs, _, extra = trainer.post_dataloading_process({"input": ids, "positions": positions}, ids)
    skip_lm_head = getattr(model, "_skip_lm_head", False)
    model._skip_lm_head = False  # chunked losses apply lm_head inside the loss; the probe needs logits
    routes, hooks = _record_routes(model)
    try:
        logits = model(inputs, **extra)
    finally:
        model._skip_lm_head = skip_lm_head
        for hook in hooks:
            hook.remove()
    if hasattr(logits, "full_tensor"):
        logits = logits.full_tensor()
    head, embedding = model.lm_head, model.tok_embeddings
    untied_head = None
    if head is not None and embedding is not None and head.weight is not embedding.weight and tied_checkpoint:
        untied_head = head.weight.full_tensor() if hasattr(head.weight, "full_tensor") else head.weight
    if int(os.environ.get("RANK", "0")) == 0:
        probe = {"input_ids": ids.cpu(), "logits": logits.float().cpu()}
        if routes:
            probe["router_topk"] = torch.stack(routes)
        torch.save(probe, out_path)
        if untied_head is not None:
            from safetensors.torch import save_file

            save_file({"lm_head.weight": untied_head.detach().float().cpu().contiguous()},
                      out_path.with_name(UNTIED_HEAD_FILE))


def _record_routes(model) -> tuple[list, list]:
    """Forward hooks on every torchtitan MoE router of ``model`` (in layer order), appending each
    call's top-k expert ids, batch 0, sorted: [L, top_k]. Returns (that list, the hook handles)."""
    from torchtitan.models.common.moe import TokenChoiceTopKRouter

    routes: list = []

    def record(_module, _inputs, output):
        topk_expert_ids_BLK = output[1]
        if hasattr(topk_expert_ids_BLK, "full_tensor"):
            topk_expert_ids_BLK = topk_expert_ids_BLK.full_tensor()
        routes.append(topk_expert_ids_BLK[0].sort(dim=-1).values.cpu())

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, TokenChoiceTopKRouter)]
    return routes, hooks


def install(tokenizer_dir: Path, dump_folder: Path, tied_checkpoint: bool) -> None:
    """Make torchtitan's ``Trainer.train`` save the probe logits after training (this process only)."""
    from torchtitan.trainer import Trainer

    upstream_train = Trainer.train

    def train_then_probe(self, *args, **kwargs):
        result = upstream_train(self, *args, **kwargs)
        save_probe_logits(self, tokenizer_dir, dump_folder / PROBE_FILE, tied_checkpoint)
        return result

    Trainer.train = train_then_probe
