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


def _causal_reference(q, k, v):
    """softmax(q k^T / sqrt(H) + causal mask) v over the whole row, documents ignored."""
    k = k.repeat_interleave(N_HEADS // N_KV, dim=2)
    v = v.repeat_interleave(N_HEADS // N_KV, dim=2)
    scores = torch.einsum("blnh,bmnh->bnlm", q, k) / H**0.5
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return torch.einsum("bnlm,bmnh->blnh", scores.softmax(-1), v)


def test_causal_attention_is_the_hand_written_causal_attention_over_the_row_and_differs_at_document_starts():
    """attention=causal: every token attends to every earlier one of its row; the document mask differs exactly
    on the tokens after a document boundary (batch 0's second document, positions 10..23), nowhere else."""
    from titan_cfg.kernels.attention import CausalAttention

    torch.manual_seed(0)
    q = torch.randn(B, L, N_HEADS, H, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, L, N_KV, H, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, L, N_KV, H, dtype=torch.float64, requires_grad=True)
    out = CausalAttention(CausalAttention.Config())(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, _causal_reference(q, k, v), rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(_causal_reference(q, k, v).sum(), (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    differs = (out - _reference(q, k, v)).abs().amax(dim=(2, 3)) > 1e-12  # [B, L]
    assert differs[0].nonzero().flatten().tolist() == list(range(10, L)) and not differs[1].any()
    with pytest.raises(ValueError, match="takes no attention mask"):
        CausalAttention(CausalAttention.Config())(q, k, v, attention_masks=_block_mask())


def test_install_causal_builds_no_mask_and_makes_the_dataloader_the_packed_rows(monkeypatch):
    """install(causal): a maskless inner attention in every decoder layer (torchtitan's trainer builds masks only for
    flex/varlen configs), hf_causal_sdpa in the transformers backend, and the packed row's dataloader, every field
    of torchtitan's kept."""
    from types import SimpleNamespace

    from torchtitan.experiments.transformers_modeling_backend import model as hf_backend_model
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.common import decoder
    from torchtitan.models.common.attention import FlexAttention, VarlenAttention

    from titan_cfg.kernels.attention import CausalAttention, hf_causal_sdpa, install
    from titan_cfg.packed_row import PackedRowDataLoader

    for module in (decoder, hf_backend_model):
        monkeypatch.setattr(module, "create_attention_mask", module.create_attention_mask)
    monkeypatch.setattr(hf_backend_model, "flex_attention_forward", hf_backend_model.flex_attention_forward)
    loader = HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path="/data/c4")
    layer = SimpleNamespace(attention=SimpleNamespace(inner_attention=None))
    config = SimpleNamespace(model_spec=SimpleNamespace(model=SimpleNamespace(layers=[layer])), dataloader=loader)
    install(config, "causal")
    inner = layer.attention.inner_attention
    assert isinstance(inner, CausalAttention.Config) and not isinstance(inner, (FlexAttention.Config,
                                                                                VarlenAttention.Config))
    assert isinstance(config.dataloader, PackedRowDataLoader.Config)
    assert (config.dataloader.dataset, config.dataloader.dataset_path) == ("c4_test", "/data/c4")
    hf = SimpleNamespace(model_spec=SimpleNamespace(model=SimpleNamespace()), dataloader=loader)
    install(hf, "causal")
    assert hf_backend_model.flex_attention_forward is hf_causal_sdpa
    assert isinstance(hf.dataloader, PackedRowDataLoader.Config)


def test_hf_causal_sdpa_ignores_the_mask_it_is_given_and_is_causal():
    """The transformers backend's function under causal: the row's causal attention whatever mask comes in."""
    from types import SimpleNamespace

    from titan_cfg.kernels.attention import hf_causal_sdpa

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N_HEADS, L, H, dtype=torch.float64) for _ in range(3))
    module = SimpleNamespace(is_causal=True, num_key_value_groups=1, training=False)
    out, _ = hf_causal_sdpa(module, q, k, v, attention_mask=torch.zeros(B, 1, L, L, dtype=torch.bool))
    scores = (q @ k.transpose(-1, -2)) / H**0.5
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    expected = (scores.softmax(-1) @ v).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
