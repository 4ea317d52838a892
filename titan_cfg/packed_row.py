"""The packed row as one sequence: torchtitan's text dataloader without per-document positions.

torchtitan 0.3.0's ``HuggingFaceTextDataset`` packs documents into rows of ``seq_len`` tokens and yields
``{"input": ids, "positions": per-document positions}``; from those positions its trainer builds the
block-causal document mask and RoPE restarts at 0 in each document. Before per-document positions
(pytorch/torchtitan#2560, merged 2026-03-12; #2559: "positions is always None") a row was one sequence:
causal attention across its documents and RoPE positions 0..L-1, which is how the walkthrough's Neuron fork
(0.2.2-based) trains. :class:`PackedRowDataLoader` gives that row: the same tokens, labels, order and
checkpointed state as torchtitan's loader, with ``positions`` left out of every batch, so no mask is built and
the model's RoPE counts over the row. ``attention=causal`` (titan_cfg.kernels.attention) installs it. A base from
2026-08-19 has no text loader: there the packed row is titan_cfg.grain_loader's (titan_cfg.forms.packed_row_loader).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch.utils.data import default_collate
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader

from titan_cfg.token_rows import LOADER_POSITIONS


def without_positions(samples: list) -> tuple[dict, object]:
    """The default collate of ``samples`` (``({"input": [L], "positions": [L]}, labels [L])`` each) with
    ``positions`` left out: ``({"input": [B, L]}, labels [B, L])``."""
    if not LOADER_POSITIONS:
        LOADER_POSITIONS.append(any("positions" in inputs for inputs, _ in samples))
    return default_collate([({k: v for k, v in inputs.items() if k != "positions"}, labels)
                            for inputs, labels in samples])


class PackedRowDataLoader(HuggingFaceTextDataLoader):
    """torchtitan's ``HuggingFaceTextDataLoader`` whose batches carry no ``positions`` (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTextDataLoader.Config):
        """``HuggingFaceTextDataLoader.Config``'s fields, unchanged."""

    def __init__(self, config: Config, **kwargs):
        super().__init__(config, **kwargs)
        self.collate_fn = without_positions  # read by each iterator the loader makes (torch DataLoader)


def loader_config(config: HuggingFaceTextDataLoader.Config) -> PackedRowDataLoader.Config:
    """``config`` (torchtitan's text dataloader config) as a :class:`PackedRowDataLoader` config, every field kept.

    Raises:
        TypeError: ``config`` is not a ``HuggingFaceTextDataLoader.Config`` (another loader has other fields).
    """
    if not isinstance(config, HuggingFaceTextDataLoader.Config):
        raise TypeError(f"the packed row needs torchtitan's HuggingFaceTextDataLoader, got {type(config).__name__}")
    return PackedRowDataLoader.Config(**{f.name: getattr(config, f.name) for f in fields(config)})
