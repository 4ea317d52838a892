"""Rows of ``seq_len`` tokens cut from the one token row a Grain base's loader yields per microbatch.

From 2026-08-19 (pytorch/torchtitan#4088) torchtitan's data path is Grain's: documents are tokenized (``bos`` and
``eos`` added), shifted within each document (inputs ``doc[:-1]``, labels ``doc[1:]``), concatenated and split
(``ConcatThenSplitPackingConfig``), and from 2026-08-20 (#4121) the split is ``num_tokens_per_batch`` tokens long,
one flat row per microbatch, which the model takes token-major (``[T]``, no batch dimension). With
``num_tokens_per_batch = local_batch_size * seq_len`` that flat row is the text loader's ``local_batch_size`` rows
of one batch laid end to end (torchtitan 0.3.0's ``HuggingFaceTextDataset``: the same shift, concatenation and
split, ``seq_len`` at a time). :func:`rows_apart` cuts it back into those rows and gives each its positions: the
packed row's 0..L-1 (titan_cfg.packed_row) or the text loader's per-document positions, restarted at the row's
start; either way a position 0 starts each row, so torchtitan's document mask (built from positions) and
titanflow's causal kernel (rows of ``seq_len``, titan_cfg.kernels.attention) keep the rows apart, as a batch
dimension did.

Pure torch: no torchtitan import (titan_cfg.grain_loader wires it into Grain's loader).
"""

from __future__ import annotations

import torch

#: Whether a batch this process collated came with per-document ``positions`` that titanflow's packed row then
#: replaced or left out (empty: none collated yet): what the installed torchtitan's loader yields, recorded on a
#: node's first run (titan_cfg.first_batch), since upstream's loader yields them only from 2026-03-18 (#2560).
LOADER_POSITIONS: list[bool] = []


def row_positions(positions_L: torch.Tensor) -> torch.Tensor:
    """``positions_L`` ([L] int64, per-document positions, 0 at each document's start) restarted at the row's start,
    as torchtitan 0.3.0's text loader normalizes each row: the tokens before the row's first 0 (the tail of a
    document that began in an earlier row) count from 0; the rest are unchanged. Returns a new [L] tensor."""
    starts = (positions_L == 0).nonzero()
    head = int(starts[0]) if len(starts) else len(positions_L)
    out = positions_L.clone()
    out[:head] = torch.arange(head, dtype=positions_L.dtype)
    return out


def rows_apart(input_T: torch.Tensor, labels_T: torch.Tensor, positions_T: torch.Tensor, seq_len: int,
               packed_row: bool) -> tuple[dict, torch.Tensor]:
    """One microbatch of a Grain base as titanflow trains it: ``({"input": [T], "positions": [T]}, labels [T])``,
    token-major as the base's model takes it, T = B * ``seq_len``, each of the B rows with its own positions: 0..L-1
    when ``packed_row`` (the row as one sequence), else the document positions ``positions_T`` restarted at the row's
    start (:func:`row_positions`).

    Raises:
        ValueError: T is not a whole number of rows of ``seq_len`` (the loader's ``num_tokens_per_batch`` must be
            ``local_batch_size * seq_len``: titan_cfg.forms.set_batch).
    """
    tokens = input_T.shape[0]
    if tokens % seq_len:
        raise ValueError(f"a microbatch of {tokens} tokens is no whole number of rows of seq_len={seq_len}; the "
                         "loader's num_tokens_per_batch must be local_batch_size * seq_len")
    positions_BL = positions_T.reshape(-1, seq_len)
    if packed_row:
        rows = torch.arange(seq_len, dtype=torch.int64).repeat(positions_BL.shape[0], 1)
    else:
        rows = torch.stack([row_positions(row) for row in positions_BL])
    return {"input": input_T, "positions": rows.reshape(-1)}, labels_T


def as_rows(tensor: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A microbatch's token ids, labels or positions as rows ``[B, seq_len]``: a token-major ``[T]`` (a Grain base)
    cut into rows of ``seq_len``; ``[B, L]`` (before it) returned as it is."""
    return tensor.reshape(-1, seq_len) if tensor.dim() == 1 else tensor
