"""The independent first-step expectation: transformers' loss of the loaded weights on the trainer's first batch.

torchtitan logs step 1's loss as the sum of every rank's token cross-entropies over the number of
valid tokens of all ranks (``Trainer.train_step``: ``global_avg_loss``), computed before any
optimizer step, so from the weights it loaded. This module repeats that number outside torchtitan:
``AutoModelForCausalLM`` loads the same weights folder and runs each rank's step-1 batch
(titan_cfg.first_batch) with the same tokens, per-document positions and masking: under a
document mask each document of a row runs on its own (it attends only to itself); otherwise the
whole row runs causally with the row's positions. It sums the cross-entropies of the same labels. Any machine repeats it from the files it trained on, whichever machine built them.
"""

from __future__ import annotations

import time
from pathlib import Path

from titan_cfg.first_batch import FIRST_BATCH_DIR
from titanflow.results import IndependentLoss

#: torchtitan's ignored label (torchtitan.components.loss.IGNORE_INDEX).
IGNORE_INDEX = -100


def documents(positions_L) -> list[tuple[int, int]]:
    """[start, end) of each document in a row of per-document positions (a new one starts at 0).

    Raises:
        ValueError: positions that do not count up by one inside a document (not torchtitan's packing).
    """
    import torch

    starts = [0, *[i for i in range(1, len(positions_L)) if int(positions_L[i]) == 0]]
    spans = list(zip(starts, [*starts[1:], len(positions_L)]))
    for start, end in spans:
        segment = positions_L[start:end]
        if not torch.equal(segment, torch.arange(int(segment[0]), int(segment[0]) + end - start)):
            raise ValueError(f"positions {segment.tolist()[:8]}... do not count up by one within a document")
    return spans


def _pieces(input_L, labels_L, positions_BL, row: int, document_mask: bool):
    """(ids, positions, labels) of each piece of one row to run on its own: each document under a
    document mask, else the whole row (positions: the row's, or 0.. when the batch has none)."""
    import torch

    positions_L = positions_BL[row] if positions_BL is not None else torch.arange(input_L.shape[0])
    spans = documents(positions_L) if document_mask else [(0, input_L.shape[0])]
    return [(input_L[a:b], positions_L[a:b], labels_L[a:b]) for a, b in spans]


def independent_first_step_loss(weights_dir: Path, dump_folder: Path) -> IndependentLoss:
    """transformers' loss (nats, float32) of ``weights_dir`` on every rank's step-1 batch under ``dump_folder``.

    Raises:
        FileNotFoundError: no rank saved a step-1 batch (``<dump_folder>/first_batch/rank*.pt``).
        ValueError: a batch without valid labels, or positions not packed as torchtitan packs them.
    """
    import torch
    from transformers import AutoModelForCausalLM

    started = time.monotonic()
    files = sorted((Path(dump_folder) / FIRST_BATCH_DIR).glob("rank*.pt"))
    if not files:
        raise FileNotFoundError(f"no step-1 batch under {Path(dump_folder) / FIRST_BATCH_DIR} (titan_cfg.first_batch)")
    model = AutoModelForCausalLM.from_pretrained(weights_dir, dtype=torch.float32).eval()
    total, tokens, segments = 0.0, 0, 0
    with torch.no_grad():
        for file in files:
            batch = torch.load(file, weights_only=True)
            for micro in batch["microbatches"]:
                input_BL, labels_BL = micro["input"], micro["labels"]
                positions_BL = micro.get("positions")
                for b in range(input_BL.shape[0]):
                    for ids_L, positions_L, labels_L in _pieces(input_BL[b], labels_BL[b], positions_BL,
                                                                b, document_mask=batch["document_mask"]):
                        # an explicit all-ones mask and no cache: transformers then applies plain causal
                        # attention, never its own packed-sequence detection from position_ids
                        logits_1LV = model(input_ids=ids_L[None], position_ids=positions_L[None],
                                           attention_mask=torch.ones_like(ids_L)[None], use_cache=False).logits
                        total += float(torch.nn.functional.cross_entropy(
                            logits_1LV[0].double(), labels_L, ignore_index=IGNORE_INDEX, reduction="sum"))
                        tokens += int((labels_L != IGNORE_INDEX).sum())
                        segments += 1
    if tokens == 0:
        raise ValueError(f"the step-1 batches under {dump_folder} hold no valid labels")
    return IndependentLoss(loss=total / tokens, tokens=tokens, forwards=segments, ranks=len(files),
                           seconds=round(time.monotonic() - started, 2))
