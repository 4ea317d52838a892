"""The CPU target's "published checkpoint": the tiny Qwen3 pretrained on the Botchan text.

It is made by the project's own native scenario (render, torchrun, export) from
the seeded tiny weights, on one rank, deterministically, and cached by a hash of
everything that decides it. Fine-tuning from it is the CPU analogue of the
walkthrough's Qwen3-4B-Instruct-2507 fine-tune (first-step loss 6.54 vs 12.43
from random init); its fine-tune first-step loss is pinned per scenario in
``expectations/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from titanflow.assets.botchan import DATASET_FILE
from titanflow.assets.cache import _build_once, _cache_key, _sha256_file, _versions

#: The pretraining recipe (one rank, batch 4 x 256 tokens, about 2.4 passes over the 63k-token text).
PRETRAIN = {"steps": 150, "lr": 3e-3, "warmup_steps": 10, "global_batch_size": 4, "seq_len": 256, "seed": 0}


def pretrain(out_dir: Path, tiny_weights: Path) -> Path:
    """Pretrain ``tiny_weights`` with :data:`PRETRAIN` and write the exported HF folder to ``out_dir``.

    Raises:
        tasks.train.TrainingError: the pretraining run failed (its log is in the message).
    """
    from tasks.config import render
    from tasks.export import assemble_export
    from tasks.train import run_training
    from titan_cfg.job import Job
    from titanflow.params import ScenarioRun

    work = out_dir.parent / f"{out_dir.name}.run"
    shutil.rmtree(work, ignore_errors=True)
    run = ScenarioRun(scenario="native", target="cpu", nproc=1, weights=str(tiny_weights), **PRETRAIN)
    rendered = render(run, tiny_weights, work)
    trained = run_training(rendered, timeout_s=3600, world_size=1)
    export_dir = assemble_export(Job.read(Path(rendered.job_path)), work)
    shutil.copytree(export_dir, out_dir, dirs_exist_ok=True)
    shutil.copy(trained.metrics_path, out_dir / "pretrain_metrics.csv")
    shutil.rmtree(work, ignore_errors=True)
    return out_dir


def ensure_pretrained(cache_root: Path | None = None) -> Path:
    """The pretrained tiny checkpoint folder, built on first use (a few minutes on 2 cores).

    The key covers the tiny weights (their own key), the dataset file, the recipe and the
    torch / torchtitan / transformers versions.
    """
    from titanflow import paths
    from titanflow.assets import ensure_assets

    root = Path(cache_root) if cache_root is not None else paths.cache_root()
    found = ensure_assets(root)
    key = _cache_key({
        "weights": found.weights_dir.name,
        "dataset": _sha256_file(found.dataset_dir / DATASET_FILE),
        "recipe": PRETRAIN,
        "versions": _versions("torch", "torchtitan", "transformers"),
    })
    return _build_once(root / "assets" / f"tiny-qwen3-pretrained-{key}",
                       lambda out_dir: pretrain(Path(out_dir), found.weights_dir))
