"""The batches of training step 1, saved by every rank for the independent first-step expectation.

Inside torchrun, each rank saves what its trainer feeds the model at step 1, before any
optimizer step, to ``<dump_folder>/first_batch/rank<N>.pt``:
``{"document_mask": bool, "loader_positions": bool, "microbatches": [{"input": [B, L] int64, "positions": [B, L] int64,
"labels": [B, L] int64}, ...]}`` (in rows also on a base whose model takes a microbatch as one token row) (one entry per gradient-accumulation microbatch; ``positions``
restart at 0 at each document). ``document_mask`` says whether the trained model lets a token
attend only within its document (the scenario's :attr:`~titan_cfg.scenarios.Scenario.document_mask`)
or to every earlier token of the row; ``loader_positions`` whether torchtitan's data loader yielded per-document
positions (upstream's from 2026-03-18, #2560), even where the packed row left them out or replaced them. The flow then computes transformers'
loss of the very weights loaded on these tokens (titanflow.judge.first_step) and holds the
trained first-step loss to it, so the pretrained verdict does not depend on which machine
built the weights or recorded a golden.
"""

from __future__ import annotations

import os
from pathlib import Path

FIRST_BATCH_DIR = "first_batch"


def rank_file(dump_folder: Path, rank: int) -> Path:
    """``<dump_folder>/first_batch/rank<rank>.pt``."""
    return Path(dump_folder) / FIRST_BATCH_DIR / f"rank{rank}.pt"


def install(dump_folder: Path, document_mask: bool) -> None:
    """Make torchtitan's ``Trainer.forward_backward_step`` save step 1's microbatches (this process only),
    with ``document_mask`` (module docstring).

    The file is written whole under a temporary name and renamed, so a reader never sees half a batch.
    """
    import torch
    from torchtitan.trainer import Trainer

    from titan_cfg import forms, token_rows  # lazy: torch

    upstream = Trainer.forward_backward_step
    out = rank_file(dump_folder, int(os.environ.get("RANK", "0")))
    seen: list[dict] = []

    def save_then_step(self, *, input_dict, labels, global_valid_tokens):
        if self.step == 1 and isinstance(input_dict, dict):  # pipeline-parallel lists are not recorded
            # in rows [B, L] whatever the install's layout (a token-major base's [T]: titan_cfg.token_rows)
            seq_len = forms.seq_len(self.config.training)
            seen.append({key: token_rows.as_rows(tensor.detach().cpu(), seq_len) for key, tensor in
                         (("input", input_dict["input"]), ("labels", labels), ("positions", input_dict.get("positions")))
                         if tensor is not None})
            out.parent.mkdir(parents=True, exist_ok=True)
            partial = out.with_suffix(".partial")
            # whether the installed torchtitan's loader yields per-document positions (upstream's from 2026-03-18),
            # also where the packed row left them out of the batch (titan_cfg.packed_row)
            yielded = token_rows.LOADER_POSITIONS[0] if token_rows.LOADER_POSITIONS else "positions" in input_dict
            torch.save({"document_mask": document_mask, "loader_positions": yielded, "microbatches": seen}, partial)
            partial.replace(out)
        return upstream(self, input_dict=input_dict, labels=labels, global_valid_tokens=global_valid_tokens)

    Trainer.forward_backward_step = save_then_step
