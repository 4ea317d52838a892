"""Resume: a retried training launch goes on from the run's newest complete step checkpoint.

torchtitan (0.3.0) saves the full training state (model, optimizer, lr scheduler, dataloader position, step)
every ``checkpoint_interval`` steps into ``<dump folder>/checkpoint/step-N/`` with torch's distributed checkpoint
(DCP), and the last step as the model-only HF export. At start it loads the highest step-N folder it deems valid
(``CheckpointManager._find_load_step``): one holding DCP's ``.metadata`` *or* an HF
``model.safetensors.index.json``; only when there is none does it use ``initial_load_path`` (a pretrained run's
weights). DCP writes ``.metadata`` last, once every rank's data is written, to a temporary name then renamed
(``FileSystemWriter.finish``): a folder with it is a complete save, one without it a save cut short. An HF index
marks an export, which holds no optimizer or dataloader state: torchtitan would still pick it.

So before each launch :func:`prepare` removes from the checkpoint folder every step folder without ``.metadata``
(deleted, not moved: each can be a full training state, tens of GB on trn2; the log names them and why). A complete
one can still be damaged (shards shorter than its metadata records, or missing: a node that lost power before its
file system flushed): the newest is checked against its own metadata (titanflow.launch.step_checkpoint.damage, a stat
per file), and one that fails is set aside (moved, never deleted) and the one before it checked, until one is intact.
What is left is complete and the newest intact, so torchtitan's own choice is the newest intact step checkpoint; the
launch line it returns (:func:`titanflow.launch.metrics.launch_line`) says which step that is and why, names what was
set aside, and opens the launch's output in ``train.log``, where it also counts the launches. When every complete one
was set aside, the launch is refused (:class:`NoIntactCheckpoint`): a start from step 1 trains the run again, which
only the user asks for (``titanflow run --resume <id> --from-step-1 true``, titanflow.run.resume).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from titan_cfg.job import CHECKPOINT_FOLDER, Job
from titanflow.launch.metrics import launch_line, log_lines, parse_launch_line, parse_step_line
from titanflow.launch.step_checkpoint import SET_ASIDE, Damage, damage, set_aside

#: A step folder as torchtitan finds one (``re.search``, as in ``_find_load_step`` and its purge).
STEP_FOLDER = re.compile(r"step-(\d+)")
#: DCP's completion mark in a checkpoint folder (torch.distributed.checkpoint.filesystem ``_metadata_fn``).
DCP_METADATA = ".metadata"
#: The index an HF save writes (torchtitan's other validity mark).
HF_INDEX = "model.safetensors.index.json"


class Resume(BaseModel):
    """Where one launch of a run starts, decided before it (:func:`prepare`)."""

    launch: int = Field(description="this launch's number among the run's launches (1: the first)")
    resumed_from_step: int | None = Field(description="step of the complete step checkpoint torchtitan loads; "
                                          "None: it starts at step 1")
    removed: list[str] = Field(description="step folders removed before the launch, each with why")
    set_aside: list[str] = Field(default_factory=list, description="damaged step checkpoints set aside before the "
                                 "launch, each as where it went and why (titanflow.launch.step_checkpoint)")
    line: str = Field(description="the launch line, as written to train.log and the run log")


def checkpoint_folder(job: Job) -> Path:
    """``<dump folder>/checkpoint``: where torchtitan saves and looks for step checkpoints."""
    return Path(job.dump_folder) / CHECKPOINT_FOLDER


def step_folders(folder: Path) -> dict[int, Path]:
    """{step: folder} of every step folder torchtitan would consider in ``folder``; {} when there is none."""
    if not folder.is_dir():
        return {}
    found = {}
    for entry in folder.iterdir():
        match = STEP_FOLDER.search(entry.name)
        if match and entry.is_dir():
            found[int(match[1])] = entry
    return found


def why_incomplete(step_dir: Path) -> str | None:
    """Why torchtitan must not load ``step_dir`` as a training state, or None when it is a complete save."""
    if (step_dir / DCP_METADATA).is_file():
        return None
    if (step_dir / HF_INDEX).is_file():
        return "a model-only HF export, no training state; the last step writes it again"
    return f"no DCP {DCP_METADATA}: a save cut short"


def launches(train_log: Path) -> list[tuple[int, int | None]]:
    """(launch number, step resumed from or None) of every launch line in ``train_log``, in order."""
    return [found for line in log_lines(train_log) if (found := parse_launch_line(line)) is not None]


def remove_incomplete(folder: Path) -> list[str]:
    """Remove every step folder of the checkpoint folder ``folder`` that is not a complete step checkpoint
    (:func:`why_incomplete`); each removed one as ``checkpoint/step-N (why)``.

    Raises:
        OSError: a step folder could not be removed.
    """
    removed = []
    for _, step_dir in sorted(step_folders(folder).items()):
        why = why_incomplete(step_dir)
        if why is not None:
            shutil.rmtree(step_dir)
            removed.append(f"{CHECKPOINT_FOLDER}/{step_dir.name} ({why})")
    return removed


class NoIntactCheckpoint(RuntimeError):
    """Every complete step checkpoint of a run was set aside as damaged; the message (``checkpoint: ...``, failure
    class ``checkpoint``) names them and the fix (:func:`no_intact_message`)."""


def newest_intact(folder: Path) -> tuple[int | None, list[tuple[Path, Damage]]]:
    """(the step of the newest intact complete step checkpoint in ``folder``, None when there is none; the damaged
    ones newer than it, newest first, each with its :class:`~titanflow.launch.step_checkpoint.Damage`). Checks the
    complete ones newest first and stops at the first intact one; moves nothing."""
    broken = []
    for step, step_dir in sorted(step_folders(folder).items(), reverse=True):
        if why_incomplete(step_dir) is not None:
            continue
        found = damage(step_dir)
        if found is None:
            return step, broken
        broken.append((step_dir, found))
    return None, broken


def no_intact_message(folder: Path, set_aside_names: list[str], run_id: str) -> str:
    """``no intact step checkpoint is left ...``: why a resume whose every complete step checkpoint is damaged is
    refused, naming ``set_aside_names`` (where each is or goes, and why) and the fix."""
    return (f"no intact step checkpoint is left in {folder}: {'; '.join(set_aside_names)}; each is kept "
            f"in {folder / SET_ASIDE}. fix: move one back that you know to be intact, or train the run again from "
            f"step 1: titanflow run --resume {run_id} --from-step-1 true (the set-aside checkpoints stay where they "
            "are)")


def prepare(job: Job, train_log: Path) -> Resume:
    """Ready the checkpoint folder for the next launch of ``job``: remove what is not a complete step checkpoint, set
    aside the damaged ones newer than the newest intact one (module docstring) and say where the launch starts.
    Numbers the launch after those in ``train_log``.

    Raises:
        NoIntactCheckpoint: it set aside every complete step checkpoint (a start from step 1 is the user's to ask).
        OSError: a step folder could not be removed or set aside (the launch must not start: torchtitan could load it).
    """
    folder = checkpoint_folder(job)
    launch = len(launches(train_log)) + 1
    removed = remove_incomplete(folder)
    step, broken = newest_intact(folder)
    aside = [f"{CHECKPOINT_FOLDER}/{d.name} -> {CHECKPOINT_FOLDER}/{SET_ASIDE}/{set_aside(d, found.reason).name} "
             f"({found.detail})" for d, found in broken]
    if step is None and aside:
        raise NoIntactCheckpoint(f"checkpoint: {no_intact_message(folder, aside, job.run_id)}")
    if step is not None:
        why = (f"{CHECKPOINT_FOLDER}/step-{step} is the newest complete step checkpoint (DCP {DCP_METADATA} "
               f"written) in {folder}, intact (every file its {DCP_METADATA} names there with its bytes)")
    else:
        why = f"no complete step checkpoint in {folder}" + (
            f" (one is saved every {job.checkpoint_interval} steps)" if job.checkpoint_interval else "")
    if aside:
        why += f"; set aside, damaged: {'; '.join(aside)}"
    if removed:
        why += f"; removed {', '.join(removed)}"
    return Resume(launch=launch, resumed_from_step=step, removed=removed, set_aside=aside,
                  line=launch_line(launch, step, why))


def last_launch(train_log: Path) -> tuple[list[int], bool]:
    """(the steps the last launch in ``train_log`` logged after its launch line, [] when none; whether its output
    holds ``torch.distributed.checkpoint``'s ``CheckpointException``, which every rank of a failed DCP load or save
    raises, and which torchelastic's error file does not record, since it derives from ``BaseException``)."""
    steps: list[int] = []
    dcp_failed = False
    for line in log_lines(train_log):
        if parse_launch_line(line) is not None:
            steps, dcp_failed = [], False
        elif (row := parse_step_line(line)) is not None:
            steps.append(row["step"])
        elif "CheckpointException" in line:
            dcp_failed = True
    return steps, dcp_failed
