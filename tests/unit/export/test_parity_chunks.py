"""kl_and_top1 in float32 vocabulary chunks agrees with the whole-vocabulary float64 computation
(log_softmax over [batch, seq, vocab] in float64, as the parity check computed it before) within
a tolerance derived from the rounding of both.

Tolerance on KL, per position, then averaged over positions (u32 = 2**-24, u64 = 2**-53):

- chunked float32: KL = S_e/S_w + log1p(S_m/S_w), with S_w = sum w, S_e = sum w e, S_m = sum w expm1(-e)
  over the vocabulary. Each term carries at most 3 float32 roundings (exp, subtractions, product) and
  each chunk's sum at most log2(8192) = 13 more (pairwise), so |dS_e| and |dS_m| <= 16 u32 sum w|e|;
  the two quotients cancel each other's first order but not their errors: |dKL| <= 32 u32 E_p|e|.
  e = (r - c) - shift with shift the float32 A - B (A, B the log-sum-exps), off from the exact
  A - B by <= u32 (|A| + |B|): E_p|e| <= E_p|d - (A - B)| + u32 (|A| + |B|), d = r - c.
- float64 reference: log p - log q per token is off by <= log2(V) u64 (|log p| + |log q|) (the
  log-sum-exp's pairwise sum over V entries, then one subtraction each); with the final sum,
  |dKL| <= 4 ceil(log2 V) u64 E_p(|log p| + |log q|).

At KL near the default threshold (titanflow.params.Tolerances.parity_kl = 1e-6) this is
about 2e-9: the chunked check decides as the float64 one did.
"""

import math

import pytest
import torch

from titanflow.export.parity import kl_and_top1

U32, U64 = 2.0**-24, 2.0**-53
VOCAB = 151_936  # Qwen3's


def _float64_reference(ref, cand):
    """(KL, top-1, max diff, KL tolerance) as the whole-vocabulary float64 computation, tolerance above."""
    r, c = ref.double(), cand.double()
    log_p, log_q = r.log_softmax(-1), c.log_softmax(-1)
    p = log_p.exp()
    kl = max((p * (log_p - log_q)).sum(-1).mean().item(), 0.0)
    a, b = r.logsumexp(-1), c.logsumexp(-1)
    e_abs = (p * ((r - c) - (a - b)[..., None]).abs()).sum(-1)
    logs = (p * (log_p.abs() + log_q.abs())).sum(-1)
    tolerance = (32 * U32 * (e_abs + U32 * (a.abs() + b.abs()))
                 + 4 * math.ceil(math.log2(r.shape[-1])) * U64 * logs).mean().item()
    top1 = (r.argmax(-1) == c.argmax(-1)).double().mean().item()
    return kl, top1, (r - c).abs().max().item(), tolerance


def _cases():
    g = torch.Generator().manual_seed(0)
    for scale in (1.0, 10.0):  # trained logits span tens of nats
        ref = torch.randn(1, 8, VOCAB, generator=g) * scale
        yield f"x{scale:g} same", ref, ref.clone()
        yield f"x{scale:g} shift -30", ref, ref - 30.0  # softmax unchanged: KL 0
        for noise in (1e-6, 1e-3, 1e-1, 1.0):
            yield f"x{scale:g} noise {noise:g}", ref, ref + torch.randn(ref.shape, generator=g) * noise
        yield f"x{scale:g} independent", ref, torch.randn(ref.shape, generator=g) * scale


@pytest.mark.parametrize("chunk", [1000, 8192, VOCAB])  # 1000: a last chunk shorter than the others
def test_chunked_float32_matches_float64_within_the_derived_tolerance(chunk):
    for name, ref, cand in _cases():
        kl, top1, max_diff = kl_and_top1(ref, cand, chunk=chunk)
        kl64, top1_64, max_diff64, tolerance = _float64_reference(ref, cand)
        assert abs(kl - kl64) <= tolerance, (name, kl, kl64, tolerance)
        assert top1 == top1_64, name  # float32 inputs: the same argmax
        assert max_diff == pytest.approx(max_diff64, rel=U32, abs=0), name  # one float32 rounding


def test_top1_takes_the_first_maximum_across_chunks_as_argmax_does():
    ref = torch.zeros(1, 2, 10)
    ref[0, 0, [3, 7]] = 5.0  # tie across the chunks [0, 4) and [4, 8)
    ref[0, 1, [5, 6]] = 5.0  # tie inside one chunk
    cand = ref.clone()
    cand[0, 0, 3] = 4.0  # candidate's maximum is 7: differs from the reference's first maximum, 3
    assert kl_and_top1(ref, cand, chunk=4)[1] == 0.5 == (ref.argmax(-1) == cand.argmax(-1)).double().mean().item()


def test_bfloat16_inputs_and_nan():
    g = torch.Generator().manual_seed(1)
    ref = (torch.randn(1, 4, 5000, generator=g) * 5).bfloat16()
    cand = (ref.float() + 0.05 * torch.randn(ref.shape, generator=g)).bfloat16()
    kl, top1, max_diff = kl_and_top1(ref, cand, chunk=777)
    kl64, top1_64, max_diff64, tolerance = _float64_reference(ref, cand)
    assert abs(kl - kl64) <= tolerance and top1 == top1_64 and max_diff == max_diff64  # bf16 differences are exact in fp32
    cand[0, 2, 100] = float("nan")
    assert math.isnan(kl_and_top1(ref, cand, chunk=777)[2])


def test_bad_input_names_the_shapes_and_the_chunk():
    with pytest.raises(ValueError, match=r"\(1, 2, 3\) vs \(1, 2, 4\)"):
        kl_and_top1(torch.zeros(1, 2, 3), torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="chunk is 0"):
        kl_and_top1(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), chunk=0)
