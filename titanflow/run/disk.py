"""The bytes a run will write under its runs folder, against the space free there: checked before launch.

An upper bound, from the parameters the run trains (:func:`trained_parameters`: counted from config.json by
titan_cfg.model_spec.Qwen3Shape.parameters) and the run's checkpoint settings:

| what | bytes | why |
|---|---|---|
| step checkpoints | 12 x parameters x min(saves, ``keep_latest_k`` + 1) | torchtitan's full-state save: float32 weights and AdamW's two float32 moments; it keeps the newest ``keep_latest_k`` (titan_cfg.job.KEEP_LATEST_K) and writes a new one before it purges the oldest; ``saves`` = steps // checkpoint interval |
| the export | 2 x parameters x bytes of ``export_dtype`` | torchtitan's last-step Hugging Face save, and the consolidated shards beside it |
| logs and the rest | :data:`OTHER_BYTES` | train.log, each rank's output, metrics.csv, summary.json, the tokenizer copied into the export (11-18 MB for Qwen's), the parity probe's logits (about 22 MB over Qwen's vocabulary), a tied lm_head a backend untied, kept beside (38 MB for the tiny model) |

``titanflow doctor`` shows the same figure (its ``disk`` check); preflight refuses a run that does not fit.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from titan_cfg.job import KEEP_LATEST_K
from titan_cfg.model_spec import Qwen3Shape
from titan_cfg.scenarios import SCENARIOS
from titanflow.params import ScenarioRun
from titanflow.paths import nearest_existing

#: Bytes per parameter of one full-state checkpoint: float32 weights (4) and AdamW's exp_avg and exp_avg_sq (4 + 4).
CHECKPOINT_BYTES_PER_PARAMETER = 12

#: Bytes per parameter of each export dtype.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

#: Bytes kept for the rest (module docstring): a 1-step cpu run of the transformers backend wrote 81 MB of it.
OTHER_BYTES = 128 * 2**20

GIB = 2**30


@dataclass(frozen=True)
class RunBytes:
    """The bytes a run writes under its runs folder, by part (each an int of bytes)."""

    checkpoints: int
    export: int
    other: int

    @property
    def total(self) -> int:
        """All of them, in bytes."""
        return self.checkpoints + self.export + self.other

    def describe(self) -> str:
        """``"0.42 GiB (step checkpoints 0.22 GiB, export 0.07 GiB, logs and the rest 0.12 GiB)"``."""
        return (f"{self.total / GIB:.2f} GiB (step checkpoints {self.checkpoints / GIB:.2f} GiB, export "
                f"{self.export / GIB:.2f} GiB, logs and the rest {self.other / GIB:.2f} GiB)")


def trained_parameters(run: ScenarioRun, shape: Qwen3Shape) -> int:
    """The parameters the run trains and saves: the checkpoint's (``shape.parameters``), plus an lm_head of its own
    where the scenario's model is not torchtitan's decoder and the checkpoint ties it to the embedding (the
    transformers backend unties it for FSDP: titanflow.export.assemble)."""
    untied = shape.tie_word_embeddings and not SCENARIOS[run.scenario].torchtitan_decoder
    return shape.parameters + (shape.vocab_size * shape.hidden_size if untied else 0)


def run_bytes(run: ScenarioRun, parameters: int) -> RunBytes:
    """The bytes ``run`` writes for ``parameters`` trained (module docstring's table)."""
    saves = run.steps // run.checkpoint_interval_resolved
    checkpoints = CHECKPOINT_BYTES_PER_PARAMETER * parameters * min(saves, KEEP_LATEST_K + 1)
    return RunBytes(checkpoints=checkpoints, export=2 * parameters * DTYPE_BYTES[run.export_dtype], other=OTHER_BYTES)


def check_space(run: ScenarioRun, shape: Qwen3Shape) -> None:
    """Refuse a run of a model of ``shape`` whose writes (:func:`run_bytes`) exceed the space free under its runs
    folder.

    Raises:
        ValueError: ``runs_dir: ...`` naming the folder, the bytes needed and free, and the fix.
    """
    root = run.runs_root()
    parameters = trained_parameters(run, shape)
    needed = run_bytes(run, parameters)
    free = shutil.disk_usage(nearest_existing(root)).free
    if needed.total > free:
        raise ValueError(f"runs_dir: {root} has {free / GIB:.2f} GiB free and the run writes up to {needed.describe()} "
                         f"for {parameters:,} parameters; fix: free space there, pass --runs-dir on a larger disk, or "
                         f"a larger --checkpoint-interval (fewer step checkpoints)")
