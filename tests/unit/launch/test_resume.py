"""Resume (issue 11): step checkpoints, what a retried launch resumes from, and the run's curve over launches.

The folder layouts are torchtitan 0.3.0's: a full training-state save is ``checkpoint/step-N/`` with DCP's
``__<rank>_0.distcp`` files and, written last, ``.metadata``; the last step's export is ``step-N/`` with
``model-*.safetensors`` and ``model.safetensors.index.json`` (measured: a killed 10-step native cpu run).
"""

import json
import sys
import threading
from pathlib import Path

import pytest
from helpers.dcp_saves import dcp_save
from pydantic import ValidationError

from titan_cfg.job import KEEP_LATEST_K
from titanflow.launch.metrics import (
    launch_line,
    log_lines,
    metrics_table,
    parse_launch_line,
)
from titanflow.launch.render import RenderedJob, make_job, render
from titanflow.launch.resume import launches, prepare
from titanflow.launch.torchrun import TrainingError, run_training
from titanflow.params import ScenarioRun


def step_line(step: int, loss: float) -> str:
    """A rank-0 step line as torchtitan 0.3.0 logs it through torchrun --tee (tests/unit/launch/test_metrics.py)."""
    return (f"[default0]:[titan] 2026-12-01 06:10:34,766 - root - INFO - \x1b[31mstep: {step:2d}  \x1b[32mloss: "
            f"{loss:.5f}  \x1b[38;2;180;60;0mgrad_norm:  1.0976  \x1b[38;2;54;234;195mmemory:  0.96GiB(4.08%)  "
            f"\x1b[34mtps: 158  \x1b[36mtflops: 0.01  \x1b[35mmfu: 0.00%\x1b[39m")


def full_save(folder: Path, step: int) -> Path:
    """A complete full-state save as DCP leaves it: its data, then ``.metadata`` (DCP's own save: helpers.dcp_saves)."""
    return dcp_save(folder, step)


def save_cut_short(folder: Path, step: int) -> Path:
    """A save killed before DCP wrote ``.metadata``: one rank's data file, half written."""
    step_dir = folder / f"step-{step}"
    step_dir.mkdir(parents=True)
    (step_dir / "__0_0.distcp").write_bytes(b"\0" * 32)
    return step_dir


def hf_export(folder: Path, step: int) -> Path:
    """The last step's model-only HF export (torchtitan's last_save_in_hf)."""
    step_dir = folder / f"step-{step}"
    (step_dir / "sharded").mkdir(parents=True)
    (step_dir / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    (step_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    return step_dir


@pytest.fixture()
def job(tmp_path, tiny_assets):
    """The default native cpu job (10 steps) with checkpoint_interval 3, written to ``run/job/job.json``."""
    run_dir = tmp_path / "run"
    job = make_job(ScenarioRun(checkpoint_interval=3), tiny_assets.weights_dir, run_dir)
    (run_dir / "job").mkdir(parents=True)
    job.write(run_dir / "job" / "job.json")
    return job


def torchtitan_load_step(folder: Path) -> int:
    """The step torchtitan 0.3.0 itself would load from ``folder`` at start (-1: none)."""
    from torchtitan.components.checkpointer.dcp import CheckpointManager

    return CheckpointManager._find_load_step(None, folder=str(folder))


def test_a_save_cut_short_and_an_earlier_export_are_removed_so_torchtitan_resumes_from_the_newest_complete(job):
    """torchtitan counts an HF export as a checkpoint, so left alone it would 'resume' from the model-only step-10
    export; after prepare only complete saves are left and torchtitan's own choice is step 6, as the line says."""
    folder = Path(job.dump_folder) / "checkpoint"
    full_save(folder, 3)
    full_save(folder, 6)
    save_cut_short(folder, 9)
    hf_export(folder, 10)
    assert torchtitan_load_step(folder) == 10

    resume = prepare(job, Path(job.dump_folder).parent / "train.log")

    assert sorted(p.name for p in folder.iterdir()) == ["step-3", "step-6"]
    assert torchtitan_load_step(folder) == 6
    assert (resume.launch, resume.resumed_from_step) == (1, 6)
    assert resume.removed == [
        "checkpoint/step-9 (no DCP .metadata: a save cut short)",
        "checkpoint/step-10 (a model-only HF export, no training state; the last step writes it again)"]
    assert resume.line.startswith("titanflow: launch 1 resumes from step 6: checkpoint/step-6 is the newest complete "
                                  "step checkpoint (DCP .metadata written)")
    assert "removed checkpoint/step-9 (no DCP .metadata: a save cut short)" in resume.line


def test_without_a_complete_save_the_launch_starts_at_step_1_and_is_numbered_after_the_earlier_ones(job, tmp_path):
    folder = Path(job.dump_folder) / "checkpoint"
    save_cut_short(folder, 3)
    train_log = tmp_path / "run" / "train.log"
    train_log.write_text("\n".join([launch_line(1, None, "first"), step_line(1, 11.9), "noise",
                                    launch_line(2, None, "second"), step_line(1, 11.9)]) + "\n")

    resume = prepare(job, train_log)

    assert (resume.launch, resume.resumed_from_step) == (3, None)
    assert not (folder / "step-3").exists()
    assert resume.line == (f"titanflow: launch 3 starts at step 1: no complete step checkpoint in {folder} (one is "
                           f"saved every 3 steps); removed checkpoint/step-3 (no DCP .metadata: a save cut short)")
    assert parse_launch_line(resume.line) == (3, None)
    assert launches(train_log) == [(1, None), (2, None)]


def test_the_curve_is_every_step_once_from_the_last_launch_that_trained_it():
    """Launch 1 logs steps 1-8 (saved at 6) and dies; launch 2 resumes from 6, logs 7 and dies; launch 3 resumes
    from 6 and logs 7-10. Steps 1-6 are launch 1's, 7-10 launch 3's: launch 1's 7 and 8 and launch 2's 7 were
    trained from a state the run no longer goes on from."""
    lines = [launch_line(1, None, "-"), *(step_line(s, 10 + s / 100) for s in range(1, 9)), "Signal 9 (SIGKILL)",
             launch_line(2, 6, "-"), step_line(7, 20.07),
             launch_line(3, 6, "-"), *(step_line(s, 30 + s / 100) for s in range(7, 11))]
    table = metrics_table(lines)
    assert list(table.step) == list(range(1, 11))
    assert list(table.loss) == [10.01, 10.02, 10.03, 10.04, 10.05, 10.06, 30.07, 30.08, 30.09, 30.10]


def test_a_launch_that_died_after_resuming_leaves_the_curve_at_its_last_step():
    """Launch 2 resumed from 3 and logged 4 and 5: launch 1's 6-8 are no longer the run's."""
    lines = [launch_line(1, None, "-"), *(step_line(s, 10 + s / 100) for s in range(1, 9)),
             launch_line(2, 3, "-"), step_line(4, 20.04), step_line(5, 20.05)]
    assert list(metrics_table(lines).loss) == [10.01, 10.02, 10.03, 20.04, 20.05]


def test_a_launch_that_starts_again_at_step_1_replaces_every_step():
    lines = [launch_line(1, None, "-"), step_line(1, 10.01), step_line(2, 10.02),
             launch_line(2, None, "-"), step_line(1, 20.01)]
    assert list(metrics_table(lines).loss) == [20.01]


def test_log_lines_cut_a_megabyte_line_without_holding_it(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"first\r\n" + b"x" * 5_000_000 + b"\n" + step_line(1, 11.9).encode() + b"\nno newline")
    lines = list(log_lines(log, max_bytes=4096))
    assert lines == ["first", "x" * 4096, step_line(1, 11.9), "no newline"]
    assert list(log_lines(tmp_path / "absent.log")) == []


FAKE_TORCHRUN = """import sys
for step in range(4, 11):  # a launch resumed from step 3, as torchtitan logs it
    print({line!r}.replace("STEP", f"{{step:2d}}").replace("LOSS", f"{{30 + step / 100:.5f}}"), flush=True)
"""


def test_a_retried_launch_appends_to_the_log_and_the_metrics_go_on_from_the_resumed_step(job, tmp_path):
    """An earlier launch logged steps 1-5, saved step 3 completely and was killed saving nothing else; the next
    launch (a stand-in for torchrun printing torchtitan's lines for steps 4-10) resumes from 3. train.log keeps
    the first launch's lines, then the launch line, then the new ones; metrics.csv and the losses are steps 1-3 of
    launch 1 and 4-10 of launch 2; the result says resumed from 3, 2 attempts."""
    run_dir = tmp_path / "run"
    folder = Path(job.dump_folder) / "checkpoint"
    full_save(folder, 3)
    earlier = [launch_line(1, None, "-"), *(step_line(s, 10 + s / 100) for s in range(1, 6)), "Signal 9 (SIGKILL)"]
    (run_dir / "train.log").write_text("\n".join(earlier) + "\n")
    script = tmp_path / "fake_torchrun.py"
    script.write_text(FAKE_TORCHRUN.format(line=step_line(0, 0).replace(" 0  ", "STEP  ", 1).replace("0.00000", "LOSS")))
    rendered = RenderedJob(run_dir=str(run_dir), job_path=str(run_dir / "job" / "job.json"), env={},
                           argv=[sys.executable, str(script), "--log-dir", str(tmp_path / "ranks")],
                           trainer_config_path=str(run_dir / "job" / "trainer_config.json"))
    seen: list[str] = []

    result = run_training(rendered, timeout_s=60, on_lines=seen.extend)

    assert (result.resumed_from_step, result.attempts) == (3, 2)
    assert result.losses == [10.01, 10.02, 10.03, 30.04, 30.05, 30.06, 30.07, 30.08, 30.09, 30.10]
    log = (run_dir / "train.log").read_text().splitlines()
    assert log[:len(earlier)] == earlier
    assert log[len(earlier)].startswith("titanflow: launch 2 resumes from step 3: checkpoint/step-3 is the newest")
    assert seen[0] == log[len(earlier)]
    assert len([line for line in log if "step:" in line]) == 5 + 7
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert metrics[0] == "step,loss,grad_norm,memory_gib,tps,tflops,mfu_pct,step_time_s" and len(metrics) == 1 + 10
    assert metrics[4].startswith("4,30.04,")


def _fake_launch(tmp_path: Path, run_dir: Path, steps: range) -> RenderedJob:
    """A stand-in for torchrun that prints torchtitan's rank-0 step lines for ``steps`` (loss 20 + step / 100)
    and exits 0."""
    script = tmp_path / "fake_torchrun.py"
    lines = [step_line(s, 20 + s / 100) for s in steps]
    script.write_text(f"for line in {lines!r}:\n    print(line, flush=True)\n")
    return RenderedJob(run_dir=str(run_dir), job_path=str(run_dir / "job" / "job.json"), env={},
                       argv=[sys.executable, str(script), "--log-dir", str(tmp_path / "ranks")],
                       trainer_config_path=str(run_dir / "job" / "trainer_config.json"))


def test_a_callback_that_blocks_loses_no_step_of_the_curve(job, tmp_path):
    """The Prefect API down mid-training (a server restart) leaves the progress artifact's update blocked in
    the callback; the curve is read from train.log, which the callback never holds up: all 10 steps."""
    run_dir = tmp_path / "run"
    rendered = _fake_launch(tmp_path, run_dir, range(1, 11))
    never = threading.Event()
    result = run_training(rendered, timeout_s=60,
                          on_lines=lambda lines: any("step:" in line for line in lines) and never.wait(600))
    assert result.losses == [20 + s / 100 for s in range(1, 11)]
    assert "the output callback was still busy" in (run_dir / "train.log").read_text()


@pytest.mark.fault
def test_exit_0_with_steps_missing_from_the_log_fails_naming_them(job, tmp_path):
    """A launch that exits 0 having logged steps 1-2 and 5 of the job's 10 is no finished training."""
    rendered = _fake_launch(tmp_path, tmp_path / "run", [1, 2, 5])
    with pytest.raises(TrainingError, match=r"torchrun exited 0 but steps 3-4, 6-10 of 1-10 were not logged"):
        run_training(rendered, timeout_s=60)


@pytest.mark.fault
@pytest.mark.parametrize(("fields", "named"), [
    ({"checkpoint_interval": 0}, "checkpoint_interval"),
    ({"checkpoint_interval": 11}, "checkpoint_interval"),  # beyond the 10 steps
    ({"checkpoint_interval": 5, "steps": 4}, "checkpoint_interval"),
])
def test_a_checkpoint_interval_outside_1_to_steps_is_refused_naming_it(fields, named):
    with pytest.raises(ValidationError) as err:
        ScenarioRun(**fields)
    assert named in str(err.value)


def test_the_interval_defaults_to_the_targets_capped_at_the_steps():
    """cpu: every 5 steps (titan_cfg/targets.py); trn2: 300, from its 10-minute budget at 2 s a step."""
    from titan_cfg.targets import TRN2_CHECKPOINT_INTERVAL

    assert ScenarioRun().checkpoint_interval_resolved == 5
    assert ScenarioRun(steps=3).checkpoint_interval_resolved == 3
    assert ScenarioRun(steps=10, checkpoint_interval=10).checkpoint_interval_resolved == 10
    assert TRN2_CHECKPOINT_INTERVAL == 300
    assert ScenarioRun(target="trn2", steps=1000).checkpoint_interval_resolved == 300
    assert ScenarioRun(target="trn2").checkpoint_interval_resolved == 10


def test_the_rendered_config_saves_the_full_state_every_interval_and_the_last_step_as_the_hf_export(
        tmp_path, tiny_assets):
    rendered = render(ScenarioRun(checkpoint_interval=3), tiny_assets.weights_dir, tmp_path / "run")
    checkpoint = json.loads(Path(rendered.trainer_config_path).read_text())["checkpoint"]
    assert json.loads(Path(rendered.job_path).read_text())["checkpoint_interval"] == 3
    assert (checkpoint["enable"], checkpoint["interval"], checkpoint["keep_latest_k"]) == (True, 3, KEEP_LATEST_K)
    assert KEEP_LATEST_K == 2
    assert checkpoint["last_save_model_only"] and checkpoint["last_save_in_hf"]
    assert checkpoint["load_step"] == -1 and checkpoint["exclude_from_loading"] == []  # the newest, everything


@pytest.mark.parametrize("damaged", ["truncated", "missing"])
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_launch_resumes_from_the_intact_one_before_it(job, damaged):
    """step-6's shard shorter than its metadata records (a file system that had not flushed it), or gone: set aside,
    kept, named in the launch line and the result; torchtitan's own choice is then step 3."""
    from helpers.dcp_saves import SHARD, truncate_shard

    folder = Path(job.dump_folder) / "checkpoint"
    full_save(folder, 3)
    newest = full_save(folder, 6)
    size = truncate_shard(newest, keep=100) if damaged == "truncated" else (newest / SHARD).stat().st_size
    if damaged == "missing":
        (newest / SHARD).unlink()

    resume = prepare(job, Path(job.dump_folder).parent / "train.log")

    reason, detail = (("truncated-shard", f"{SHARD} has 100 bytes; its .metadata records {size:,}")
                      if damaged == "truncated" else
                      ("missing-shard", f"{SHARD} is missing; its .metadata records {size:,} bytes in it"))
    assert resume.resumed_from_step == 3 and torchtitan_load_step(folder) == 3
    assert resume.set_aside == [f"checkpoint/step-6 -> checkpoint/set-aside/step-6.broken-{reason} ({detail})"]
    assert (folder / "set-aside" / f"step-6.broken-{reason}" / ".metadata").is_file()  # kept, not deleted
    assert resume.line.startswith("titanflow: launch 1 resumes from step 3: checkpoint/step-3 is the newest complete "
                                  "step checkpoint (DCP .metadata written)")
    assert resume.line.endswith(f"; set aside, damaged: {resume.set_aside[0]}")


def test_with_every_complete_checkpoint_damaged_the_launch_is_refused_naming_them_as_class_checkpoint(job):
    from helpers.dcp_saves import SHARD, truncate_shard

    from titanflow.judge.failures import classify_failure
    from titanflow.launch.resume import NoIntactCheckpoint

    folder = Path(job.dump_folder) / "checkpoint"
    truncate_shard(full_save(folder, 3), keep=10)
    (full_save(folder, 6) / SHARD).unlink()
    with pytest.raises(NoIntactCheckpoint) as refused:
        prepare(job, Path(job.dump_folder).parent / "train.log")
    said = str(refused.value)
    assert said.startswith(f"checkpoint: no intact step checkpoint is left in {folder}: checkpoint/step-6 -> "
                           "checkpoint/set-aside/step-6.broken-missing-shard (")
    assert "; checkpoint/step-3 -> checkpoint/set-aside/step-3.broken-truncated-shard (" in said
    assert f"titanflow run --resume {job.run_id} --from-step-1 true" in said
    assert sorted(p.name for p in (folder / "set-aside").iterdir()) == ["step-3.broken-truncated-shard",
                                                                        "step-6.broken-missing-shard"]
    assert classify_failure(verdict="fail", failed_task="train", error=f"NoIntactCheckpoint: {said}",
                            losses=None) == "checkpoint"


#: A stand-in for torchrun whose one rank loads the step checkpoint as torchtitan's does at start, with DCP, under
#: torchelastic's ``@record`` (as torchtitan's entry point), and fails there: DCP's CheckpointException derives from
#: BaseException, which ``@record`` does not catch, so no error.json is written, as on a real launch.
FAKE_LOADING_RANK = """import os, sys, warnings
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.elastic.multiprocessing.errors import record

rank_dir = os.path.join(sys.argv[sys.argv.index("--log-dir") + 1], "launch", "attempt_0", "0")
os.makedirs(rank_dir, exist_ok=True)
os.environ["TORCHELASTIC_ERROR_FILE"] = os.path.join(rank_dir, "error.json")
warnings.simplefilter("ignore", UserWarning)


@record
def main():
    state = {{"model.w": torch.empty(64, 64), "optimizer.m": torch.empty(64, 64), "step": 0}}
    dcp.load(state, checkpoint_id={checkpoint!r})


main()
"""


@pytest.mark.fault
def test_a_checkpoint_the_ranks_cannot_load_is_set_aside_and_classed_checkpoint_never_retried(job, tmp_path):
    """step-6 holds every byte its metadata records, zeros (blocks allocated, never flushed): the check passes it,
    the rank's DCP load fails. The launch's error says so and the fix; step-6 is set aside (load-failed), so the next
    launch resumes from step 3; the class is checkpoint, which the train task does not retry."""
    from helpers.dcp_saves import zero_shard

    from titanflow.judge.failures import classify_failure
    from titanflow.launch.step_checkpoint import damage
    from titanflow.prefect_ops.stopped import classify_exception

    run_dir, folder = tmp_path / "run", Path(job.dump_folder) / "checkpoint"
    full_save(folder, 3)
    zero_shard(full_save(folder, 6))
    assert damage(folder / "step-6") is None
    (run_dir / "train.log").write_text("\n".join([launch_line(1, None, "-"), step_line(1, 10.01)]) + "\n")
    script = tmp_path / "fake_loading_rank.py"
    script.write_text(FAKE_LOADING_RANK.format(checkpoint=str(folder / "step-6")))
    rendered = RenderedJob(run_dir=str(run_dir), job_path=str(run_dir / "job" / "job.json"), env={},
                           argv=[sys.executable, str(script), "--log-dir", str(tmp_path / "ranks")],
                           trainer_config_path=str(run_dir / "job" / "trainer_config.json"))
    seen: list[str] = []
    with pytest.raises(TrainingError) as failed:
        run_training(rendered, timeout_s=120, on_lines=seen.extend)
    said = str(failed.value)
    assert said.startswith("train: torchrun exited 1; checkpoint: checkpoint/step-6 did not load in the ranks (every "
                           "file its .metadata names is there in full, so their bytes are wrong); set aside as "
                           "checkpoint/set-aside/step-6.broken-load-failed, kept; fix: titanflow run --resume "
                           f"{job.run_id} goes on from the newest intact step checkpoint before it")
    assert "CheckpointException ranks:dict_keys([0])" in said  # the launch's last lines
    assert "titanflow: checkpoint: checkpoint/step-6 did not load in the ranks" in (run_dir / "train.log").read_text()
    assert any(line.startswith("titanflow: checkpoint: checkpoint/step-6 did not load") for line in seen)
    assert classify_failure(verdict="fail", failed_task="train", error=f"TrainingError: {said}", losses=None) == \
        "checkpoint"
    assert classify_exception("train", failed.value) == "checkpoint"  # not infrastructure: never retried
    assert torchtitan_load_step(folder) == 3
    assert prepare(job, run_dir / "train.log").resumed_from_step == 3
