"""titanflow's local dataset on torchtitan's Grain data path (a base from 2026-08-19, pytorch/torchtitan#4088), giving
the model the rows torchtitan 0.3.0's text loader gives it (titan_cfg.token_rows says how the two line up).

:func:`text_loader` is the ``GrainDataLoader.Config`` titan_cfg.forms.text_loader takes on such a base:

- source: the job's dataset folder read as 0.3.0's ``c4_test`` loader reads it (``datasets.load_dataset(path,
  split="train")``, upstream's ``HuggingFaceRandomAccessSource``), in file order: ``shuffle=False`` (0.3.0 reads the
  first epoch unshuffled; Grain shuffles by default); ``repeat=True`` loops it (0.3.0 reshuffles each later epoch
  with seed 42 + epoch, Grain repeats the same order: the two part only after a whole pass over the dataset);
- processor: upstream's ``TextProcessor`` (``text``, ``bos`` and ``eos`` added, shifted within the document) with
  each document's positions 0..n-1 given (:class:`DocumentText`): left to the packing, positions wrap at
  ``max_context_length``, which 0.3.0's do not;
- packing: upstream's ``ConcatThenSplitPackingConfig`` (concatenate, split ``num_tokens_per_batch`` at a time);
- collator: :class:`RowsCollator`, upstream's ``TextCollator`` whose flat row is cut into rows of ``seq_len``
  (``max_context_length``) with positions that restart at each row (titan_cfg.token_rows.rows_apart);
  ``packed_row=True`` (attention=causal, titan_cfg.kernels.attention) gives every row 0..L-1.

Imports torchtitan's Grain modules: only a Grain base imports this module (titan_cfg.forms).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from torchtitan.components.data import (ConcatThenSplitPackingConfig, GrainDataLoader, HuggingFaceRandomAccessSource,
                                        SingleDatasetConfig, TextCollator, TextSequence)
from torchtitan.hf_datasets.text_datasets import TextProcessor

from titan_cfg import token_rows


class DocumentText(TextProcessor):
    """Upstream's ``TextProcessor`` whose ``TextSequence`` carries the document's positions 0..n-1 (n: its input
    tokens), so the packing's positions restart at documents only (module docstring); None as upstream's for a
    document under two tokens."""

    @dataclass(kw_only=True, slots=True)
    class Config(TextProcessor.Config):
        """``TextProcessor.Config``'s fields, unchanged."""

    def __call__(self, sample, rng: np.random.Generator) -> TextSequence | None:
        sequence = TextProcessor.__call__(self, sample, rng)
        if sequence is None:
            return None
        return replace(sequence, positions=np.arange(len(sequence.input_ids), dtype=np.int64))


class RowsCollator(TextCollator):
    """Upstream's ``TextCollator``, its flat row of ``num_tokens_per_batch`` tokens given as rows of
    ``max_context_length`` (titan_cfg.token_rows.rows_apart): ``({"input": [T], "positions": [T]}, labels [T])``."""

    @dataclass(kw_only=True, slots=True)
    class Config(TextCollator.Config):
        """``packed_row``: each row's positions are 0..L-1 (the row as one sequence), not its documents'."""

        packed_row: bool = False

    def __init__(self, config: Config, *, context) -> None:
        super().__init__(config, context=context)
        self._seq_len = context.max_context_length
        self._packed_row = config.packed_row

    def __call__(self, rows):
        inputs, labels = TextCollator.__call__(self, rows)
        if not token_rows.LOADER_POSITIONS:
            token_rows.LOADER_POSITIONS.append("positions" in inputs)
        return token_rows.rows_apart(inputs["input"], labels, inputs["positions"], self._seq_len,
                                     packed_row=self._packed_row)


def _kept(sample) -> bool:
    """Grain's post-filter of upstream's own text datasets: a document the processor kept (not None)."""
    return sample is not None


def text_loader(dataset_path: str, packed_row: bool = False) -> GrainDataLoader.Config:
    """The Grain loader of the job's dataset folder ``dataset_path`` (module docstring)."""
    document = SingleDatasetConfig(source=HuggingFaceRandomAccessSource.Config(path=dataset_path, split="train"),
                                   processor=DocumentText.Config(), post_filters=(_kept,))
    return GrainDataLoader.Config(dataset=ConcatThenSplitPackingConfig(dataset=document),
                                  collator=RowsCollator.Config(packed_row=packed_row), shuffle=False, repeat=True)


def packed_row_loader(config: GrainDataLoader.Config) -> GrainDataLoader.Config:
    """``config`` (:func:`text_loader`'s) with the packed row's positions (:class:`RowsCollator`).

    Raises:
        TypeError: ``config``'s collator is not a :class:`RowsCollator` (another loader's rows are not titanflow's).
    """
    if not isinstance(config.collator, RowsCollator.Config):
        raise TypeError(f"the packed row needs titanflow's RowsCollator, got {type(config.collator).__name__}")
    return replace(config, collator=RowsCollator.Config(packed_row=True))
