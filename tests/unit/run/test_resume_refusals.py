"""Resume a run (issue 11): what is refused before anything runs, each message naming the field and the fix, and
what a resumed run carries over (titanflow.run.resume)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.dcp_saves import dcp_save

from titanflow.cli import main
from titanflow.params import ScenarioRun
from titanflow.record.summary import Continuation, RunSummary, read_summary
from titanflow.run.recorder import RunRecorder
from titanflow.run.resume import newest_complete_step, own_run_folder, resumed_run
from titanflow.task_names import TaskName

pytestmark = pytest.mark.fault


def _run_folder(root: Path, run_id: str = "r1", verdict: str | None = "fail", flow_run_id: str = "f-1",
                **parameters) -> Path:
    """A run folder as the flow leaves it: summary.json with the run's parameters; verdict fail (its train task
    failed), cancelled, pass, or None (killed before its end: the summary written at its start)."""
    run = ScenarioRun(run_id=run_id, runs_dir=str(root), **parameters)
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    record = RunRecorder(run_dir, RunSummary(run_id=run_id, flow_run_id=flow_run_id, scenario=run.scenario,
                                             target=run.target, init=run.init, steps=run.steps,
                                             parameters=run.model_dump()))
    if verdict == "fail":
        record.summary.failed_task, record.summary.error = TaskName.train, "TrainingError: train: timed out after 90 s"
    path = record.write()
    if verdict in ("pass", "cancelled"):  # as the flow ends them, written over the record
        raw = json.loads(path.read_text()) | {"verdict": verdict, "reason": f"{verdict} as planted"}
        path.write_text(json.dumps(raw))
    return run_dir


def test_a_run_folder_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^resume: no run folder .*/nope; fix: pass the id of a run under"):
        resumed_run({"resume": "nope", "runs_dir": str(tmp_path)})


@pytest.mark.parametrize("given", ["../../etc", "a/b", ".hidden", ""])
def test_a_resume_that_is_not_a_run_id_is_refused_before_any_folder_is_read(tmp_path, given):
    # ../../etc was refused only because that folder had no summary.json
    with pytest.raises(ValueError, match=r"^resume: .* is not a run id \(a folder name"):
        resumed_run({"resume": given, "runs_dir": str(tmp_path / "runs")})


def test_a_changed_scenario_is_named_as_the_command_line_gives_it(tmp_path, tiny_assets):
    _run_folder(tmp_path)
    with pytest.raises(ValueError) as err:
        resumed_run({"resume": "r1", "runs_dir": str(tmp_path), "scenario": "moe"})
    assert "drop the scenario argument (only --timeout-s, --from-step-1 may change)" in str(err.value)  # not --scenario, no such flag


def test_a_folder_without_summary_is_refused(tmp_path):
    (tmp_path / "bare").mkdir()
    with pytest.raises(ValueError, match=r"^resume: .*bare has no summary.json.*start a new run"):
        resumed_run({"resume": "bare", "runs_dir": str(tmp_path)})


def test_a_run_that_passed_is_refused(tmp_path):
    _run_folder(tmp_path, verdict="pass")
    with pytest.raises(ValueError, match=r"^resume: run r1 passed; there is nothing to continue"):
        resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})


def test_parameters_that_change_the_job_are_refused_naming_each(tmp_path, tiny_assets):
    _run_folder(tmp_path, steps=10, kernels={"rope": "reference"})
    with pytest.raises(ValueError) as err:
        resumed_run({"resume": "r1", "runs_dir": str(tmp_path), "steps": 20, "global_batch_size": 8, "lr": 8e-4})
    message = str(err.value)
    assert message.startswith("steps: run r1 is resumed with steps 20, not its 10; global_batch_size 8, not its None")
    assert "drop --steps, --global-batch-size (only --timeout-s, --from-step-1 may change)" in message
    assert "lr" not in message.split(". A resumed")[0]  # the recorded 8e-4 again: not a change


def test_the_same_values_given_again_and_a_new_timeout_are_taken(tmp_path, tiny_assets):
    """The recorded parameters are kept; given again (kernels as the command line writes them) they are no change;
    timeout_s may change. The resumed run keeps its id and folder."""
    _run_folder(tmp_path, verdict="cancelled", steps=6, kernels={"rope": "reference"})
    resumption = resumed_run({"resume": "r1", "runs_dir": str(tmp_path), "kernels": "rope=reference",
                              "scenario": "native", "timeout_s": 600})
    run = resumption.run
    assert (run.steps, run.kernels, run.timeout_s, run.run_id, run.resume) == (6, {"rope": "reference"}, 600, "r1",
                                                                                "r1")
    assert resumption.run_dir == tmp_path / "r1" and resumption.previous_job is None
    assert resumption.from_step is None  # no step checkpoint yet: training starts at step 1
    step = resumption.continuation("f-2")
    assert (step.flow_run_id, step.previous_flow_run_id, step.previous_verdict, step.from_step) == (
        "f-2", "f-1", "cancelled", None)


def test_a_killed_run_without_verdict_is_resumed(tmp_path, tiny_assets):
    _run_folder(tmp_path, verdict=None)
    assert resumed_run({"resume": "r1", "runs_dir": str(tmp_path)}).continuation(None).previous_verdict is None


def test_another_run_id_is_refused():
    with pytest.raises(ValueError, match="run_id: other is not the resumed run r1; a resumed run keeps its id"):
        ScenarioRun(resume="r1", run_id="other")


def test_a_run_still_training_is_refused_naming_its_processes(tmp_path, tiny_assets):
    """A process whose environment names the run's job file (as every rank's TITANFLOW_JOB does) is a training
    of that run: resuming beside it would write the same checkpoints."""
    run_dir = _run_folder(tmp_path)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={"TITANFLOW_JOB": str(run_dir / "job" / "job.json")})
    try:
        with pytest.raises(ValueError, match=rf"^resume: run r1 is still running \(processes {rank.pid} "):
            resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})
    finally:
        rank.kill()
        rank.wait()
    resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})  # once it ended


def test_a_job_that_would_render_differently_is_refused_before_its_files_are_written(tmp_path, tiny_assets):
    from titan_cfg.job import JOB_FILE
    from titanflow.launch.render import make_job

    run_dir = _run_folder(tmp_path)
    trained = make_job(ScenarioRun(run_id="r1", runs_dir=str(tmp_path)), tiny_assets.weights_dir, run_dir)
    (run_dir / "job").mkdir()
    trained.model_copy(update={"weights_dir": "/elsewhere/tiny-qwen3"}).write(run_dir / "job" / JOB_FILE)
    resumption = resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"^resume: run r1 trained another job .*weights_dir '/elsewhere/tiny-qwen3'"
                                         rf" -> '{tiny_assets.weights_dir}'"):
        resumption.check_job(tiny_assets.weights_dir)
    trained.write(run_dir / "job" / JOB_FILE)
    resumed_run({"resume": "r1", "runs_dir": str(tmp_path)}).check_job(tiny_assets.weights_dir)  # the same: taken
    with pytest.raises(ValueError, match="weights_digest abc -> def"):
        resumption.previous.weights_digest = "abc"
        resumption.check_job(tiny_assets.weights_dir, weights_digest="def")


def test_the_newest_complete_step_checkpoint_is_where_a_resume_goes_on(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    assert newest_complete_step(checkpoint) is None
    for step in (3, 6):
        dcp_save(checkpoint, step)
    (checkpoint / "step-9").mkdir()  # a save cut short: no DCP .metadata
    assert newest_complete_step(checkpoint) == 6


def test_a_retried_flow_run_finds_the_folder_it_made(tmp_path):
    _run_folder(tmp_path, run_id="native-cpu-random-20261201-100000-aaaa", flow_run_id="f-1")
    _run_folder(tmp_path, run_id="native-cpu-random-20261201-110000-bbbb", flow_run_id="f-2")
    run = ScenarioRun(runs_dir=str(tmp_path))
    assert own_run_folder(run, "f-2") == tmp_path / "native-cpu-random-20261201-110000-bbbb"
    assert own_run_folder(run, "f-3") is None


def test_the_summary_and_history_row_count_the_resumes(tmp_path):
    from titanflow.record import history

    run_dir = _run_folder(tmp_path)
    summary = read_summary(run_dir / "summary.json")
    summary.resumed = [Continuation(flow_run_id=f"f-{i}", previous_flow_run_id=f"f-{i - 1}", previous_verdict="fail",
                                    from_step=3 * i, at=summary.started_at) for i in (2, 3)]
    (run_dir / "summary.json").write_text(summary.model_dump_json())
    assert read_summary(run_dir / "summary.json").resumes == 2
    row = history.append_run(run_dir / "summary.json", tmp_path / "history")
    assert row.resumes == 2
    assert history.read_history(history_dir=tmp_path / "history").resumes.tolist() == [2]


def test_the_command_line_refuses_before_any_flow_run(tmp_path, capsys):
    _run_folder(tmp_path, verdict="pass")
    assert main(["run", "--resume", "r1", "--runs-dir", str(tmp_path)]) == 2
    assert "resume: run r1 passed" in capsys.readouterr().err
    assert main(["run", "--resume", "nope", "--runs-dir", str(tmp_path)]) == 2
    assert "resume: no run folder" in capsys.readouterr().err
    assert main(["run", "--runs-dir", str(tmp_path)]) == 2
    assert "scenario: missing; fix: name one" in capsys.readouterr().err
    assert main(["run", "native", "--run-id", "r1", "--runs-dir", str(tmp_path)]) == 2
    assert "(--resume r1 continues it)" in capsys.readouterr().err


def test_a_resume_goes_on_from_the_newest_intact_checkpoint_and_without_one_is_refused_naming_the_damaged(
        tmp_path, capsys, tiny_assets):
    """No training: DCP's own saves of steps 3 and 6 in the run's checkpoint folder (no job.json: train/checkpoint),
    damaged as a node that lost power leaves them. step-6 truncated: the resume goes on from step 3. step-3's shard
    gone too: refused, naming both and the fix; the command line exits 2 and nothing moves. With --from-step-1 true
    the run starts at step 1, both set aside (kept); a later resume is refused again unless it asks again."""
    from helpers.dcp_saves import SHARD, truncate_shard

    run_dir = _run_folder(tmp_path, verdict="fail")
    checkpoint = run_dir / "train" / "checkpoint"
    dcp_save(checkpoint, 3)
    size = truncate_shard(dcp_save(checkpoint, 6), keep=512)
    assert resumed_run({"resume": "r1", "runs_dir": str(tmp_path)}).from_step == 3
    assert sorted(p.name for p in checkpoint.iterdir()) == ["step-3", "step-6"]  # the check moves nothing

    (checkpoint / "step-3" / SHARD).unlink()
    with pytest.raises(ValueError) as refused:
        resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})
    said = str(refused.value)
    assert said.startswith(f"resume: run r1: no intact step checkpoint is left in {checkpoint}: checkpoint/step-6 "
                           f"({SHARD} has 512 bytes; its .metadata records {size:,}); checkpoint/step-3 ({SHARD} is "
                           "missing; its .metadata records ")
    assert said.endswith("fix: move one back that you know to be intact, or train the run again from step 1: titanflow "
                         "run --resume r1 --from-step-1 true (the set-aside checkpoints stay where they are)")
    assert main(["run", "--resume", "r1", "--runs-dir", str(tmp_path)]) == 2
    assert "resume: run r1: no intact step checkpoint is left" in capsys.readouterr().err
    assert sorted(p.name for p in checkpoint.iterdir()) == ["step-3", "step-6"]

    asked = resumed_run({"resume": "r1", "runs_dir": str(tmp_path), "from_step_1": True})
    assert asked.from_step is None and asked.run.from_step_1
    assert sorted(p.name for p in (checkpoint / "set-aside").iterdir()) == ["step-3.broken-missing-shard",
                                                                            "step-6.broken-truncated-shard"]
    with pytest.raises(ValueError, match=r"^resume: run r1: no intact step checkpoint is left in .*: "
                                         r"checkpoint/set-aside/step-3\.broken-missing-shard; "
                                         r"checkpoint/set-aside/step-6\.broken-truncated-shard; each is kept"):
        resumed_run({"resume": "r1", "runs_dir": str(tmp_path)})  # asked once: not carried to the next resume


def test_from_step_1_without_resume_is_refused_naming_it():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="from_step_1: true without resume; a new run starts at step 1 anyway; "
                                              "fix: drop --from-step-1"):
        ScenarioRun(from_step_1=True)
