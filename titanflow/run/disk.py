"""The bytes a run will write under its runs folder and into the cache, against the space free there: checked before
launch.

An upper bound, from the parameters the run trains (:func:`trained_parameters`: counted from config.json by
titan_cfg.model_spec.Qwen3Shape.parameters) and the run's checkpoint settings:

| what | bytes | why |
|---|---|---|
| step checkpoints | 12 x parameters x min(saves, ``keep_latest_k`` + 1) | torchtitan's full-state save: float32 weights and AdamW's two float32 moments; it keeps the newest ``keep_latest_k`` (titan_cfg.job.KEEP_LATEST_K) and writes a new one before it purges the oldest; ``saves`` = steps // checkpoint interval |
| the export | 2 x parameters x bytes of ``export_dtype`` | torchtitan's last-step Hugging Face save, and the consolidated shards beside it |
| logs and the rest | :data:`OTHER_BYTES` | train.log, each rank's output, metrics.csv, summary.json, the tokenizer copied into the export (11-18 MB for Qwen's), the parity probe's logits (about 22 MB over Qwen's vocabulary), a tied lm_head a backend untied, kept beside (38 MB for the tiny model) |
| into the cache, once | :func:`cache_writes` | a ``trim``'s checkpoint (parameters x bytes of the source's ``torch_dtype``), the embedded tiny model's pretrained checkpoint; each only where the cache has none yet |

Writes on one file system are summed against its free space (:func:`space_needs`). Not counted: the Neuron compile
cache (its size is the compiler's) and a Hub download (``titanflow doctor``'s disk check adds it once config.json is
on the machine). ``titanflow doctor`` shows the same figures (its ``disk`` check); preflight refuses a run that does
not fit.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from titan_cfg.job import KEEP_LATEST_K
from titan_cfg.model_spec import Qwen3Shape, config_shape
from titan_cfg.scenarios import SCENARIOS
from titanflow import paths
from titanflow.params import ScenarioRun
from titanflow.paths import nearest_existing
from titanflow.record import retention
from titanflow.weights.trim import cached_trim

#: Bytes per parameter of one full-state checkpoint: float32 weights (4) and AdamW's exp_avg and exp_avg_sq (4 + 4).
CHECKPOINT_BYTES_PER_PARAMETER = 12

#: Bytes per parameter of each export dtype, and of a checkpoint's ``torch_dtype`` (an unknown one counted as 4).
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
    return RunBytes(checkpoints=checkpoints, export=2 * parameters * DTYPE_BYTES[run.export_dtype_resolved], other=OTHER_BYTES)


#: The fix for a runs folder without room, and for a cache without room.
RUNS_FIX = "free space there, pass --runs-dir on a larger disk, or run with a larger --checkpoint-interval (fewer " \
           "step checkpoints)"
CACHE_FIX = "free space there, or export TITANFLOW_CACHE=<a folder on a larger disk>"


@dataclass(frozen=True)
class Write:
    """``size`` bytes the run writes under ``folder`` (made by then or not); ``what``: the words for them; ``fix``:
    what makes room for them."""

    folder: Path
    size: int
    what: str
    fix: str = RUNS_FIX


@dataclass(frozen=True)
class SpaceNeed:
    """What one file system is asked to hold: ``needed`` bytes against ``free``, asked at ``where`` (the nearest
    existing folder of its first write); ``what``: its writes in words."""

    where: Path
    needed: int
    free: int
    what: str
    fix: str

    @property
    def ok(self) -> bool:
        """Whether ``needed`` fits in ``free``."""
        return self.needed <= self.free

    def describe(self) -> str:
        """``"0.20 GiB free at /runs, the run writes up to 0.42 GiB (...)"``."""
        return f"{self.free / GIB:.2f} GiB free at {self.where}, {self.what}"


def space_needs(writes: list[Write]) -> list[SpaceNeed]:
    """``writes`` summed by file system (the device of each folder's nearest existing parent), in the order first
    named; several on one are said as ``"a and b: 1.23 GiB in all"``."""
    groups: dict[int, tuple[Path, list[Write]]] = {}
    for write in writes:
        where = nearest_existing(write.folder)
        groups.setdefault(os.stat(where).st_dev, (where, []))[1].append(write)
    needs = []
    for where, group in groups.values():
        needed = sum(w.size for w in group)
        what = " and ".join(w.what for w in group) + (f": {needed / GIB:.2f} GiB in all" if len(group) > 1 else "")
        fix = "; or ".join(dict.fromkeys(w.fix for w in group))
        needs.append(SpaceNeed(where, needed, shutil.disk_usage(where).free, what, fix))
    return needs


def cache_writes(run: ScenarioRun, config: dict) -> list[Write]:
    """What ``run`` writes into the cache (titanflow.paths.cache_root) before training, where the cache has none yet:
    a ``trim`` of pretrained weights, its checkpoint (parameters of the trimmed ``config`` x bytes of its
    ``torch_dtype``; titanflow.weights.trim.cached_trim finds one made); the embedded tiny model's pretrained checkpoint
    (pretrained init, no ``weights``): its pretraining run's writes (:func:`run_bytes` of its recipe,
    titanflow.run.pretrained.RECIPES) and the float32 checkpoint copied out of it. ``config``: the trained model's
    config.json (titanflow.run.model_config.trained_config)."""
    root, writes = paths.cache_root(), []
    shape = config_shape(config, SCENARIOS[run.scenario].model_type)
    if run.trim is not None and run.init == "pretrained" and cached_trim(root, config) is None:
        dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
        size = shape.parameters * DTYPE_BYTES.get(dtype, 4)
        what = f"the run writes the trimmed checkpoint, {size / GIB:.2f} GiB ({dtype}), into the cache {root}"
        writes.append(Write(root / "trimmed", size, what, CACHE_FIX))
    if run.weights is None and run.init == "pretrained" and not _pretrained_built(root, config.get("model_type")):
        from titanflow.run.pretrained import RECIPES  # lazy: pandas (via titanflow.launch.metrics)

        scenario, recipe = RECIPES[config["model_type"]]
        pretraining = ScenarioRun(scenario=scenario, target="cpu", nproc_per_node=1, **recipe)
        size = run_bytes(pretraining, shape.parameters).total + 4 * shape.parameters
        what = f"the run builds the pretrained tiny checkpoint, {size / GIB:.2f} GiB, into the cache {root}"
        writes.append(Write(root / "assets", size, what, CACHE_FIX))
    return writes


def _pretrained_built(root: Path, model_type: str | None) -> bool:
    """Whether the cache holds a pretrained tiny checkpoint of ``model_type`` (titanflow.run.pretrained's folders)."""
    return any(json.loads(config.read_text()).get("model_type") == model_type
               for config in (root / "assets").glob("*-pretrained-*/config.json"))


def check_space(run: ScenarioRun, config: dict) -> None:
    """Refuse ``run`` of the model of ``config`` (its config.json, trimmed as the run trims it) when what it writes
    under its runs folder (:func:`run_bytes`) and into the cache (:func:`cache_writes`) does not fit the space free
    there (:func:`space_needs`).

    Raises:
        ValueError: ``runs_dir: ...`` (or ``TITANFLOW_CACHE: ...`` for the cache's file system alone) naming the
            folder, the bytes needed and free, and the fix.
    """
    root = run.runs_root()
    parameters = trained_parameters(run, config_shape(config, SCENARIOS[run.scenario].model_type))
    needed = run_bytes(run, parameters)
    runs = Write(root, needed.total, f"the run writes up to {needed.describe()} for {parameters:,} parameters")
    for need in space_needs([runs, *cache_writes(run, config)]):
        if not need.ok:
            field, where = ("runs_dir", root) if need.what.startswith(runs.what) else ("TITANFLOW_CACHE", need.where)
            raise ValueError(f"{field}: {where} has {need.free / GIB:.2f} GiB free and {need.what}; fix: {need.fix}"
                             + (_prune_fix(root) if field == "runs_dir" else ""))


def _prune_fix(runs_dir: Path) -> str:
    """The prune command and what it would free under ``runs_dir`` (titanflow.record.retention), or "" when the
    policy frees nothing there."""
    freed = sum(d.bytes for d in retention.plan(runs_dir) if d.action != "keep")
    return (f"; or titanflow prune --apply --runs-dir {runs_dir}, which frees {freed / GIB:.2f} GiB there under the "
            "retention policy (titanflow/record/retention.toml)") if freed else ""
