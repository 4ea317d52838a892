"""A flow process SIGKILLed while its Slurm job trained on: the job's rank-0 node log holds steps train.log never
got. The next launch of the run (a resume) copies them into train.log first, so the curve is whole; a resume
while the job still runs is refused with the scancel that ends it (measured: a 2 node x 1 rank run killed at step
5 trained to 10 and every later resume failed "steps 6-9 of 1-10 were not logged")."""

import pytest

from titanflow.launch.metrics import launch_line, metrics_table
from titanflow.launch.slurm import job as slurm_job


def step(step: int, loss: float, rank0: bool = True) -> str:
    """A node console's step line; rank 0's carry torchrun's ``[default0]:`` prefix (titanflow.launch.render)."""
    return f"{'[default0]:' if rank0 else '[default1]:'}[titan] - root - INFO - step: {step:2d}  loss: {loss:.5f}  " \
           f"grad_norm:  1.0000  memory:  0.96GiB(4.08%)  tps: 158"


@pytest.fixture()
def killed_run(tmp_path, monkeypatch):
    """train.log with launch 1's steps 1-5; the nodes' logs with all 10 (n1 holds rank 0); no job still running."""
    monkeypatch.setattr(slurm_job, "job_state", lambda job_id: {"JobState": "COMPLETED"})
    nodes = tmp_path / "train" / "nodes"
    nodes.mkdir(parents=True)
    (nodes / "jobs.txt").write_text("17\n")
    (nodes / "n1.log").write_text("\n".join(step(s, 12 - s / 10) for s in range(1, 11)) + "\n")
    (nodes / "n2.log").write_text("\n".join(step(s, 99.0, rank0=False) for s in range(1, 11)) + "\n")
    (nodes / "batch-17.log").write_text(step(3, 55.0) + "\n")
    log = tmp_path / "train.log"
    log.write_text("\n".join([launch_line(1, None, "-"), *(step(s, 12 - s / 10) for s in range(1, 6))]) + "\n")
    return nodes, log


def test_steps_the_killed_follower_never_copied_are_recovered_from_the_rank0_node_log(killed_run):
    nodes, log = killed_run
    assert slurm_job.recover_rank0_steps(nodes, log) == [6, 7, 8, 9, 10]
    assert "titanflow: steps 6-10 recovered from n1.log" in log.read_text()
    with open(log, "a") as handle:  # the resume's own launch: from step 9's checkpoint, trains step 10 again
        handle.write(launch_line(2, 9, "-") + "\n" + step(10, 10.9) + "\n")
    table = metrics_table(log.read_text().splitlines())
    assert list(table.step) == list(range(1, 11))
    assert list(table.loss) == [round(12 - s / 10, 5) for s in range(1, 10)] + [10.9]
    assert slurm_job.recover_rank0_steps(nodes, log) == []  # nothing more to take


def test_the_jobs_slurm_still_runs_are_the_ones_a_resume_names_for_scancel(killed_run, monkeypatch):
    nodes, _ = killed_run
    monkeypatch.setattr(slurm_job, "job_state", lambda job_id: {"JobState": "RUNNING"})
    assert slurm_job.running_jobs(nodes) == ["17"]
