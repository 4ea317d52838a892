"""KernelAttention equals attention computed by hand under torchtitan's document mask,
and FlexAttention still has no CPU backward (why the cpu target needs it)."""

import pytest
import torch

from titan_cfg.compat.cpu import make_importable_without_triton

make_importable_without_triton()

from torch.nn.attention.flex_attention import and_masks, create_block_mask  # noqa: E402
from torchtitan.models.common.attention import get_causal_mask_mod, get_document_mask_mod  # noqa: E402

from titan_cfg.kernels.attention import KernelAttention  # noqa: E402

B, L, N_HEADS, N_KV, H = 2, 24, 6, 2, 8  # asymmetric: GQA 3:1, seq not a power of two


def _positions() -> torch.Tensor:
    # batch 0: documents of 10 and 14 tokens; batch 1: one document of 24
    return torch.stack([torch.cat([torch.arange(10), torch.arange(14)]), torch.arange(L)])


def _block_mask():
    mask_mod = and_masks(get_causal_mask_mod(), get_document_mask_mod(_positions()))
    return create_block_mask(mask_mod, B, None, L, L, device="cpu", _compile=False)


def _reference(q, k, v):
    """softmax(q k^T / sqrt(H) + mask) v with the mask written out from the positions."""
    doc = (_positions() == 0).cumsum(-1)  # document index per token
    allowed = (doc[:, :, None] == doc[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    k = k.repeat_interleave(N_HEADS // N_KV, dim=2)
    v = v.repeat_interleave(N_HEADS // N_KV, dim=2)
    scores = torch.einsum("blnh,bmnh->bnlm", q, k) / H**0.5
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return torch.einsum("bnlm,bmnh->blnh", scores.softmax(-1), v)


def test_masked_sdpa_matches_hand_written_document_attention():
    torch.manual_seed(0)
    q = torch.randn(B, L, N_HEADS, H, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, L, N_KV, H, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, L, N_KV, H, dtype=torch.float64, requires_grad=True)
    out = KernelAttention(KernelAttention.Config())(q, k, v, attention_masks=_block_mask(), enable_gqa=True)
    expected = _reference(q, k, v)
    assert out.shape == (B, L, N_HEADS, H)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_flex_attention_still_has_no_cpu_backward():
    """If this starts passing, the cpu target could use torchtitan's flex attention again."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 2, 128, 16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, q, q).sum().backward()


def test_the_dense_attention_builds_torchtitans_mask_eagerly_with_the_same_mask(monkeypatch):
    """install(sdpa) swaps torchtitan's torch.compile(create_block_mask) for eager_block_mask in the torchtitan
    decoder's module and in the transformers backend's; the mask it gives is the hand-written document mask."""
    from types import SimpleNamespace

    from torchtitan.experiments.transformers_modeling_backend import model as hf_backend_model
    from torchtitan.models.common import decoder

    from titan_cfg.kernels.attention import dense_mask, eager_block_mask, hf_masked_sdpa, install

    for module in (decoder, hf_backend_model):  # restored after the test
        monkeypatch.setattr(module, "create_attention_mask", module.create_attention_mask)
    monkeypatch.setattr(hf_backend_model, "flex_attention_forward", hf_backend_model.flex_attention_forward)
    layer = SimpleNamespace(attention=SimpleNamespace(inner_attention=None))
    install(SimpleNamespace(model_spec=SimpleNamespace(model=SimpleNamespace(layers=[layer]))), "sdpa")
    assert decoder.create_attention_mask is eager_block_mask
    assert isinstance(layer.attention.inner_attention, KernelAttention.Config)
    install(SimpleNamespace(model_spec=SimpleNamespace(model=SimpleNamespace())), "sdpa")
    assert hf_backend_model.create_attention_mask is eager_block_mask
    assert hf_backend_model.flex_attention_forward is hf_masked_sdpa

    mask_mod = and_masks(get_causal_mask_mod(), get_document_mask_mod(_positions()))
    doc = (_positions() == 0).cumsum(-1)
    allowed = (doc[:, :, None] == doc[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril()
    built = eager_block_mask(mask_mod, B, None, L, L, device="cpu", BLOCK_SIZE=128)
    assert torch.equal(dense_mask(built, B, L, "cpu"), allowed[:, None])
