"""Checks that run before anything is trained or written, shared by the CLI and the flow.

Nothing here trains or imports torch in this process: parameters, the target's
runtime, the runs folder, and, for a local weights folder, its config.json
against the requested shapes (the embedded tiny model is built on first use,
seconds, by titanflow.assets). Each failure is a :class:`ValueError` whose
message starts with the field to change.
"""

from __future__ import annotations

import datetime
import secrets
from pathlib import Path

from pydantic import ValidationError

from titan_cfg.model_spec import Qwen3Shape, qwen3_shape
from titan_cfg.scenarios import SCENARIOS
from titanflow.run.params import ScenarioRun, check_runs_dir_writable, is_hub_id


def new_run_id(run: ScenarioRun) -> str:
    """``<scenario>-<target>-<init>-<UTC time>-<4 hex>``: sortable and unique."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{run.scenario}-{run.target}-{run.init}-{stamp}-{secrets.token_hex(2)}"


def describe(err: ValidationError) -> str:
    """One ``field: message`` line per pydantic error, without pydantic's links and input dumps."""
    lines = []
    for error in err.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        # whole-model checks (loc empty) already start with the field they are about
        lines.append(f"{field}: {message}" if field and not message.startswith(f"{field}:") else message)
    return "\n".join(lines)


def check_weights_folder(run: ScenarioRun, folder: Path, complete: bool = True) -> Qwen3Shape:
    """The folder is a Qwen3 HF folder with a tokenizer, and ``seq_len`` fits its context; returns
    the model shape its config.json gives (the one read of it: the job stores it). ``complete=False``
    (a files-only render, ``titanflow render``) checks config.json alone: tokenizer, index and
    safetensors are what a launch needs, checked when the job is rendered to run.

    Raises:
        ValueError: naming ``weights`` or ``seq_len``.
    """
    if folder.is_file():
        raise ValueError(f"weights: {folder} is a file; pass the folder that holds config.json")
    shape = qwen3_shape(folder, SCENARIOS[run.scenario].model_type)  # ConfigError names the config.json field
    if run.seq_len_resolved > shape.max_position_embeddings:
        raise ValueError(
            f"seq_len: {run.seq_len_resolved} exceeds the model's max_position_embeddings "
            f"{shape.max_position_embeddings}; pass --seq-len {shape.max_position_embeddings} or less"
        )
    if not complete:
        return shape
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"weights: {folder} has no tokenizer.json; torchtitan reads the tokenizer from it")
    from titanflow.weights.check import check_checkpoint, check_save_index

    check_save_index(folder)  # the export is sharded by this index, whatever the init
    if run.init == "pretrained":
        from titan_cfg.trainer_config import check_pretrained_source

        check_pretrained_source(folder)
        check_checkpoint(folder)  # every shard and tensor the load reads, before any rank starts
    return shape


def preflight(run: ScenarioRun, *, launch: bool = True) -> Path:
    """Check everything checkable without compute; return the (not yet created) run folder, or for
    ``run.resume`` the resumed run's folder, which must exist (titanflow.run.resume checks the rest).

    ``launch=False`` (rendering only) skips the check that this machine can run the target.

    Raises:
        ValueError: the message starts with the field to change.
    """
    if launch and run.target == "trn2":  # every missing piece of the node at once: titanflow doctor's checks
        from titanflow.run.doctor import require_ready

        require_ready(run)
    if launch:
        missing = run.target_spec.missing_runtime()
        if missing:
            raise ValueError(f"target: {run.target} cannot run on this machine: {missing}; "
                             f"`titanflow render {run.scenario} --target {run.target}` writes its job files")
    root = run.runs_root()
    check_runs_dir_writable(root)
    run_dir = root / (run.resume or run.run_id or new_run_id(run))
    if run.resume is not None and not run_dir.is_dir():
        raise ValueError(f"resume: no run folder {run_dir}; pass the id of a run under {root} (--runs-dir names "
                         "another parent)")
    if run_dir.exists() and run.resume is None:
        raise ValueError(f"run_id: {run_dir} already exists; pass another run id, or none for a fresh one "
                         f"(--resume {run_dir.name} continues it)")
    if run.weights is None and run.init == "random":  # the embedded tiny model: built once (seconds)
        from titanflow.assets import TINY_SPECS, ensure_assets

        check_weights_folder(run, ensure_assets(spec=TINY_SPECS[SCENARIOS[run.scenario].model_type]).weights_dir)
    elif run.weights is not None and not is_hub_id(run.weights):  # Hub ids and the pretrained
        # tiny checkpoint (built by pull_weights, minutes) are checked by render_config
        check_weights_folder(run, Path(run.weights).expanduser().resolve(), complete=launch)
    return run_dir
