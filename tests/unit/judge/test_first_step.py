"""The independent first-step expectation (titanflow.judge.first_step) on a hand-made step-1 batch.

The batch is packed as torchtitan packs it (titan_cfg.first_batch's format): two ranks, rows of
documents whose positions restart at 0. The expected numbers are computed here by running each
piece through the same transformers model, so the test pins the packing, masking and token
weighting across ranks, not transformers itself.
"""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from titan_cfg.first_batch import rank_file
from titanflow.judge.first_step import IGNORE_INDEX, documents, independent_first_step_loss


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    """A 2-layer Qwen3 of vocab 50, saved as a Hugging Face folder."""
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("qwen3-mini")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _save(dump, rank, input_BL, positions_BL, labels_BL, document_mask=True):
    path = rank_file(dump, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"document_mask": document_mask,
                "microbatches": [{"input": input_BL, "positions": positions_BL, "labels": labels_BL}]}, path)


def _ce_sum(model, ids, positions, labels):
    logits = model(input_ids=ids[None], position_ids=positions[None], use_cache=False).logits[0]
    return float(torch.nn.functional.cross_entropy(logits.double(), labels, ignore_index=IGNORE_INDEX,
                                                   reduction="sum"))


def test_documents_split_where_positions_restart():
    assert documents(torch.tensor([3, 4, 0, 1, 2, 0, 1])) == [(0, 2), (2, 5), (5, 7)]
    with pytest.raises(ValueError, match="count up by one"):
        documents(torch.tensor([0, 1, 3]))


def test_loss_is_every_ranks_token_sum_over_all_valid_tokens(weights_dir, tmp_path):
    """Rank 0: one row of two documents (4 + 4 tokens); rank 1: one document of 8 with two ignored
    labels. The expectation is (sum of the 14 valid token losses) / 14, not a mean of rank means."""
    torch.manual_seed(1)
    ids0, ids1 = torch.randint(0, 50, (1, 8)), torch.randint(0, 50, (1, 8))
    labels0, labels1 = torch.randint(0, 50, (1, 8)), torch.randint(0, 50, (1, 8))
    labels1[0, :2] = IGNORE_INDEX
    pos0, pos1 = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]), torch.arange(8)[None]
    _save(tmp_path, 0, ids0, pos0, labels0)
    _save(tmp_path, 1, ids1, pos1, labels1)
    got = independent_first_step_loss(weights_dir, tmp_path)

    model = AutoModelForCausalLM.from_pretrained(weights_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        total = (_ce_sum(model, ids0[0, :4], pos0[0, :4], labels0[0, :4])
                 + _ce_sum(model, ids0[0, 4:], pos0[0, 4:], labels0[0, 4:])
                 + _ce_sum(model, ids1[0], pos1[0], labels1[0]))
    assert (got.tokens, got.forwards, got.ranks) == (14, 3, 2)
    assert got.loss == pytest.approx(total / 14, abs=1e-9)


def test_a_document_mask_hides_earlier_documents_and_its_absence_does_not(weights_dir, tmp_path):
    """The second document's losses do not depend on the first document's tokens under a document
    mask; without one (the transformers backend's causal mask) they do."""
    torch.manual_seed(2)
    ids, labels = torch.randint(0, 50, (1, 8)), torch.randint(0, 50, (1, 8))
    labels[0, :4] = IGNORE_INDEX  # only the second document counts
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    other = ids.clone()
    other[0, :4] = (ids[0, :4] + 7) % 50  # another first document
    losses = {}
    for mask in (True, False):
        for name, row in (("ids", ids), ("other", other)):
            _save(tmp_path / f"{mask}-{name}", 0, row, positions, labels, document_mask=mask)
            losses[mask, name] = independent_first_step_loss(weights_dir, tmp_path / f"{mask}-{name}").loss
    assert losses[True, "ids"] == pytest.approx(losses[True, "other"], abs=1e-9)
    assert not math.isclose(losses[False, "ids"], losses[False, "other"], abs_tol=1e-6)


def test_no_batch_is_named(weights_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="first_batch"):
        independent_first_step_loss(weights_dir, tmp_path)
