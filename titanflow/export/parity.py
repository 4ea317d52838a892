"""Logit parity: the exported model in transformers against the trained torchtitan model.

The trained model's logits on the probe batch are saved inside torchrun
(titan_cfg.probe); here the export is loaded with ``AutoModelForCausalLM`` in
float32 and run on the same ids. A transposed tensor, a wrong RoPE base, a tie
lost on export or a skipped load shows up as a large KL divergence, even when
every key and shape is right.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class ParityReport(BaseModel):
    """KL(trained || export) in nats per token (mean over positions), top-1 agreement (fraction),
    and the largest absolute logit difference, on ``tokens`` probe positions. For an MoE,
    ``router_agreement`` is the fraction of (layer, token) pairs whose top-k expert set is the
    same in both models, over ``router_layers`` layers (None for a dense model)."""

    kl: float
    top1_agreement: float
    max_abs_logit_diff: float
    tokens: int
    router_agreement: float | None = None
    router_layers: int = 0


def kl_and_top1(reference_BLV, candidate_BLV) -> tuple[float, float, float]:
    """Mean KL(softmax(reference) || softmax(candidate)) over [batch, seq] positions, top-1 agreement,
    max |reference - candidate|. Inputs: logits [batch, seq, vocab], any float dtype (computed in fp64)."""
    ref, cand = reference_BLV.double(), candidate_BLV.double()
    log_p, log_q = ref.log_softmax(-1), cand.log_softmax(-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean().item()
    top1 = (ref.argmax(-1) == cand.argmax(-1)).double().mean().item()
    return max(kl, 0.0), top1, (ref - cand).abs().max().item()


def check_parity(exported_model, probe_path: Path) -> ParityReport:
    """Run the exported model (transformers, fp32) on the probe ids and compare with the
    trained model's saved logits.

    Raises:
        FileNotFoundError: no probe file (the training run did not finish its probe).
        ValueError: vocab or length differ between the two logits.
    """
    import torch

    if not probe_path.is_file():
        raise FileNotFoundError(f"validate: {probe_path} missing; the trained model's probe logits were not saved")
    probe = torch.load(probe_path)
    routes, hooks = _record_hf_routes(exported_model)
    try:
        with torch.no_grad():
            exported = exported_model(probe["input_ids"]).logits
    finally:
        for hook in hooks:
            hook.remove()
    trained = probe["logits"]
    if exported.shape != trained.shape:
        raise ValueError(f"validate: export logits {tuple(exported.shape)} vs trained {tuple(trained.shape)}")
    kl, top1, max_diff = kl_and_top1(trained, exported)
    router = router_agreement(probe["router_topk"], torch.stack(routes)) if "router_topk" in probe else None
    return ParityReport(kl=kl, top1_agreement=top1, max_abs_logit_diff=max_diff, tokens=trained.shape[1],
                        router_agreement=router, router_layers=len(routes))


def router_agreement(trained_topk, exported_topk) -> float:
    """Fraction of (layer, token) pairs with the same expert set; inputs [layers, L, top_k] int,
    each row sorted ascending.

    Raises:
        ValueError: different shapes (another number of MoE layers, tokens or top_k).
    """
    if trained_topk.shape != exported_topk.shape:
        raise ValueError(f"validate: router choices {tuple(exported_topk.shape)} in the export vs "
                         f"{tuple(trained_topk.shape)} trained ([moe layers, tokens, top_k])")
    return (trained_topk == exported_topk).all(dim=-1).double().mean().item()


def _record_hf_routes(model) -> tuple[list, list]:
    """Forward hooks on transformers' Qwen3 MoE routers (``mlp.gate``, layer order) collecting each
    call's chosen experts sorted: [L, top_k] (batch 1). Returns (that list, the hook handles)."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    routes: list = []

    def record(_module, _inputs, output):
        routes.append(output[2].sort(dim=-1).values)  # (router_logits, router_scores, router_indices)

    return routes, [m.register_forward_hook(record) for m in model.modules() if isinstance(m, Qwen3MoeTopKRouter)]
