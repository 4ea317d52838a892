"""A Grain base's token-major microbatch as titanflow trains it (titan_cfg.token_rows, titan_cfg.forms): rows of
seq_len cut back out of the one token row, each with positions of its own, each attended on its own by titanflow's
kernels, as the text loader's batch dimension kept them apart; the batch counted in tokens from the job's rows."""

from dataclasses import dataclass

import pytest
import torch

from titan_cfg.compat.cpu import make_importable_without_triton

make_importable_without_triton()

from titan_cfg import forms  # noqa: E402
from titan_cfg.token_rows import as_rows, row_positions, rows_apart  # noqa: E402

N_HEADS, N_KV, H = 4, 2, 8


def test_row_positions_restart_the_documents_tail_at_the_rows_start_as_the_text_loader_does():
    # the tail of a document begun in an earlier row (5, 6, 7), then two documents: 0.3.0's _normalize_positions
    assert row_positions(torch.tensor([5, 6, 7, 0, 1, 0, 1, 2])).tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert row_positions(torch.tensor([9, 10, 11])).tolist() == [0, 1, 2]  # one document's middle: the whole row
    assert row_positions(torch.tensor([0, 1, 0])).tolist() == [0, 1, 0]  # starts with a document: unchanged


def test_rows_apart_keeps_tokens_and_labels_and_gives_each_row_its_positions():
    """Two rows of 4 in one token row of 8 whose packed positions run on across the row boundary (a document of 6
    tokens from token 2): the packed row's rows count 0..3 each; the document positions restart at row 2's start."""
    input_T, labels_T = torch.arange(100, 108), torch.arange(200, 208)
    positions_T = torch.tensor([7, 8, 0, 1, 2, 3, 4, 5])
    inputs, labels = rows_apart(input_T, labels_T, positions_T, 4, packed_row=True)
    assert torch.equal(inputs["input"], input_T) and torch.equal(labels, labels_T)
    assert inputs["positions"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    inputs, _ = rows_apart(input_T, labels_T, positions_T, 4, packed_row=False)
    assert inputs["positions"].tolist() == [0, 1, 0, 1, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="no whole number of rows of seq_len=3"):
        rows_apart(input_T, labels_T, positions_T, 3, packed_row=True)


def test_as_rows_cuts_a_token_row_and_leaves_rows_alone():
    assert as_rows(torch.arange(6), 3).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert as_rows(torch.arange(6).reshape(2, 3), 3).tolist() == [[0, 1, 2], [3, 4, 5]]


def _qkv(rows: int, seq_len: int):
    torch.manual_seed(0)
    return (torch.randn(rows, seq_len, n, H, dtype=torch.float64) for n in (N_HEADS, N_KV, N_KV))


def test_causal_attention_of_a_token_row_is_each_rows_own_causal_attention():
    """CausalAttention given [T, N, H] with row_tokens = L equals it given [B, L, N, H] (rows as a batch): no token
    attends across a row boundary; without row_tokens a token row is refused."""
    from titan_cfg.kernels.attention import CausalAttention

    q, k, v = _qkv(3, 5)
    batched = CausalAttention(CausalAttention.Config())(q, k, v, enable_gqa=True)
    flat = CausalAttention(CausalAttention.Config(row_tokens=5))(*(t.reshape(15, *t.shape[2:]) for t in (q, k, v)),
                                                                 enable_gqa=True)
    assert flat.shape == (15, N_HEADS, H)
    torch.testing.assert_close(flat, batched.reshape(15, N_HEADS, H), rtol=0, atol=1e-12)
    one_row = CausalAttention(CausalAttention.Config())(*(t.reshape(1, 15, *t.shape[2:]) for t in (q, k, v)),
                                                        enable_gqa=True)
    assert not torch.allclose(one_row.reshape(15, N_HEADS, H)[5:], flat[5:])  # one row of 15 attends across
    with pytest.raises(ValueError, match="row_tokens=0"):
        CausalAttention(CausalAttention.Config())(*(t.reshape(15, *t.shape[2:]) for t in (q, k, v)))


def test_hf_causal_sdpa_of_a_token_row_is_each_rows_own_causal_attention():
    """The transformers backend gives one row [1, N, T, H] on a token-major base: with row_tokens the result is the
    rows' own causal attention, [1, T, N, H]."""
    from types import SimpleNamespace

    from titan_cfg.kernels.attention import hf_causal_sdpa

    q, k, v = (t.transpose(1, 2) for t in _qkv(3, 5))  # [B, N, L, H]
    module = SimpleNamespace(num_key_value_groups=N_HEADS // N_KV, is_causal=True, training=False)
    batched, _ = hf_causal_sdpa(module, q, k, v)
    one_row = [t.transpose(0, 1).reshape(1, t.shape[1], 15, H) for t in (q, k, v)]
    flat, _ = hf_causal_sdpa(module, *one_row, row_tokens=5)
    assert flat.shape == (1, 15, N_HEADS, H)
    torch.testing.assert_close(flat[0], batched.reshape(15, N_HEADS, H), rtol=0, atol=1e-12)


def test_kernel_attention_of_a_token_row_keeps_rows_and_documents_apart_by_positions():
    """KernelAttention (attention=sdpa) given [T, N, H] and the mask torchtitan builds from the token row's positions
    equals it given the rows as a batch with their own masks: each row's positions start at 0, so the document mask
    is also the row mask."""
    from torch.nn.attention.flex_attention import and_masks, create_block_mask
    from torchtitan.models.common.attention import get_causal_mask_mod, get_document_mask_mod

    from titan_cfg.kernels.attention import KernelAttention

    def block_mask(positions_BL):
        batch, seq_len = positions_BL.shape
        mask_mod = and_masks(get_causal_mask_mod(), get_document_mask_mod(positions_BL))
        return create_block_mask(mask_mod, batch, None, seq_len, seq_len, device="cpu", _compile=False)

    positions_BL = torch.stack([torch.cat([torch.arange(2), torch.arange(3)]), torch.arange(5)])  # rows of 5
    q, k, v = _qkv(2, 5)
    attention = KernelAttention(KernelAttention.Config())
    batched = attention(q, k, v, attention_masks=block_mask(positions_BL), enable_gqa=True)
    flat = attention(*(t.reshape(10, *t.shape[2:]) for t in (q, k, v)),
                     attention_masks=block_mask(positions_BL.reshape(1, 10)), enable_gqa=True)
    assert flat.shape == (10, N_HEADS, H)
    torch.testing.assert_close(flat, batched.reshape(10, N_HEADS, H), rtol=0, atol=1e-12)


@dataclass
class _Training:
    """The batch fields of torchtitan's training config from 2026-08-20 (#4121), with its defaults."""

    num_tokens_per_microbatch_per_dp_rank: int = 16384
    num_tokens_per_train_step: int = -1
    max_context_length: int = 2048
    steps: int = 10000


def test_the_batch_in_tokens_is_the_jobs_rows_times_seq_len(monkeypatch):
    monkeypatch.setattr(forms, "token_major", lambda: True)
    training = forms.set_batch(_Training(), local_batch_size=4, global_batch_size=8, seq_len=256, steps=2)
    assert training == _Training(num_tokens_per_microbatch_per_dp_rank=1024, num_tokens_per_train_step=2048,
                                 max_context_length=256, steps=2)
    assert (forms.local_batch_size(training), forms.seq_len(training)) == (4, 256)
    assert forms.set_batch(_Training(), local_batch_size=4, global_batch_size=-1, seq_len=256).num_tokens_per_train_step == -1
