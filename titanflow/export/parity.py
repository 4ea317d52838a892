"""Logit parity: the exported model in transformers against the trained torchtitan model.

The trained model's logits on the probe batch are saved inside torchrun
(titan_cfg.probe); here the export is loaded with ``AutoModelForCausalLM`` in
float32 and run on the same ids. A transposed tensor, a wrong RoPE base, a tie
lost on export or a skipped load shows up as a large KL divergence, even when
every key and shape is right.
"""

from __future__ import annotations

from pathlib import Path

from titanflow.results import ParityReport


#: Vocabulary entries per chunk of :func:`kl_and_top1`: [batch, seq, 8192] float32 temporaries
#: (1.3 MB for the 40-token probe) instead of [batch, seq, vocab] float64 ones (49 MB at 151,936).
VOCAB_CHUNK = 8192


def kl_and_top1(reference_BLV, candidate_BLV, chunk: int = VOCAB_CHUNK) -> tuple[float, float, float]:
    """Mean KL(softmax(reference) || softmax(candidate)) over [batch, seq] positions (nats), top-1
    agreement (fraction), max |reference - candidate|. Inputs: logits [batch, seq, vocab], any float
    dtype, computed in float32 over ``chunk`` vocabulary entries at a time (two passes); per-position
    sums across chunks are kept in float64 ([batch, seq] only).

    Pass 1 gives A = logsumexp(reference), B = logsumexp(candidate) (logsumexp of the chunks'
    logsumexps), the argmax of each (first maximum, as ``argmax``) and the max difference. Pass 2
    uses KL = E_p[e] + log1p(E_p[expm1(-e)]), e = (r - c) - (A - B), p = exp(r - A) normalised by
    its sum: exact for any constant subtracted from r - c, so the float32 rounding of A - B cancels,
    and with e small the two terms are computed without the cancellation of log p - log q at the
    logits' magnitude. Top-1 agreement is exact for float32 (or narrower) inputs, the max difference
    within one float32 rounding (relative 2**-24); KL's error is derived and tested in
    tests/unit/export/test_parity_chunks.py.

    Raises:
        ValueError: shapes differ, or ``chunk`` < 1.
    """
    import torch

    if reference_BLV.shape != candidate_BLV.shape:
        raise ValueError(f"parity: logits {tuple(reference_BLV.shape)} vs {tuple(candidate_BLV.shape)}")
    if chunk < 1:
        raise ValueError(f"parity: chunk is {chunk}; give a positive number of vocabulary entries")
    vocab = reference_BLV.shape[-1]
    spans = [(start, min(start + chunk, vocab)) for start in range(0, vocab, chunk)]

    def pieces(start, end):
        return reference_BLV[..., start:end].float(), candidate_BLV[..., start:end].float()

    lse_ref, lse_cand, best_ref, best_cand, diffs = [], [], [], [], []
    for start, end in spans:
        ref, cand = pieces(start, end)
        lse_ref.append(ref.logsumexp(-1))
        lse_cand.append(cand.logsumexp(-1))
        best_ref.append(ref.max(-1))
        best_cand.append(cand.max(-1))
        diffs.append((ref - cand).abs().max())  # a tensor: NaN stays NaN
    lse_p, lse_q = torch.stack(lse_ref).logsumexp(0), torch.stack(lse_cand).logsumexp(0)
    top1 = (_argmax_of_chunks(best_ref, spans) == _argmax_of_chunks(best_cand, spans)).double().mean().item()
    shift = lse_p - lse_q
    total = mean_e = mean_expm1 = torch.zeros(lse_p.shape, dtype=torch.float64)
    for start, end in spans:
        ref, cand = pieces(start, end)
        weight = (ref - lse_p[..., None]).exp()
        e = (ref - cand) - shift[..., None]
        total = total + weight.sum(-1).double()
        mean_e = mean_e + (weight * e).sum(-1).double()
        mean_expm1 = mean_expm1 + (weight * torch.expm1(-e)).sum(-1).double()
    kl = (mean_e / total + torch.log1p(mean_expm1 / total)).mean().item()
    return max(kl, 0.0), top1, torch.stack(diffs).max().item()


def _argmax_of_chunks(maxima, spans):
    """[batch, seq] vocabulary index of the first maximum, from each chunk's (values, indices)."""
    import torch

    values = torch.stack([m.values for m in maxima])  # [chunks, batch, seq]
    which = values.argmax(0)  # first chunk holding the maximum
    indices = torch.stack([m.indices + start for m, (start, _) in zip(maxima, spans)])
    return indices.gather(0, which[None])[0]


def check_parity(exported_model, probe_path: Path) -> ParityReport:
    """Run the exported model (transformers, fp32) on the probe ids and compare with the
    trained model's saved logits.

    Raises:
        FileNotFoundError: no probe file (the training run did not finish its probe).
        ValueError: vocab or length differ between the two logits.
    """
    import torch

    probe = read_probe(probe_path)
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
    with_bias = probe.get("router_topk_with_expert_bias")
    return ParityReport(kl=kl, top1_agreement=top1, max_abs_logit_diff=max_diff, tokens=trained.shape[1],
                        router_agreement=router, router_layers=len(routes),
                        expert_bias_router_agreement=(router_agreement(with_bias, torch.stack(routes))
                                                      if with_bias is not None else None))


def read_probe(probe_path: Path) -> dict:
    """The probe file titan_cfg.probe saved: {"input_ids": [1, L] int64, "logits": [1, L, vocab] float32,
    and for an MoE "router_topk": [moe layers, L, top_k] int64, with "router_topk_with_expert_bias" beside it when
    the MoE trained a load-balancing bias}.

    Raises:
        FileNotFoundError: no probe file (the training run did not finish its probe).
    """
    import torch

    if not probe_path.is_file():
        raise FileNotFoundError(f"validate: {probe_path} missing; the trained model's probe logits were not saved")
    return torch.load(probe_path)


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
