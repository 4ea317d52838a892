"""Slurm as the engine, on a real two-node cluster on loopback (the session's ``slurm_cluster``: Debian's slurm-wlm
and munge, nodes n1 and n2 of one CPU each on 127.0.0.1).

- The cluster comes up, answers ``srun`` on both nodes, and goes down leaving none of its processes.
- Slurm's refusals (a partition it lacks, more nodes than it has) stop a run before anything runs, in Slurm's words.
- A job past its timeout, and one interrupted, are cancelled on every node (no training: a sleeping command).
- A job waits for the training slot of a host its nodes run on, held by another run, before it is submitted.
- The native cpu scenario on 2 nodes x 1 rank trains the curve of 1 node x 2 ranks step for step (its first 4: the golden
  workload (goldens/loss_curves/native-cpu-random.curve.csv was recorded on 1 node x 2 ranks), exported and
  validated as on one node.
- A rank killed on one node ends the job on both within the timeout, as infrastructure, leaving nothing.
"""

from __future__ import annotations

import _thread
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers.golden_curve import assert_golden_curve_of_one_node
from helpers.run_processes import rank_process, run_processes, wait_until

from titanflow.launch.render import render
from titanflow.params import ScenarioRun

#: Steps of the two-node training: 4 of the golden workload (the same workload key but for the steps:
#: titanflow.judge.workload.world_size_asked), every one shared with the 10-step golden at the default warm-up
#: (titan_cfg.lr_schedule), so the flow itself judges all 4 against it. 4 steps cover the warm-up (1, 2), the
#: stable step (3) and the first decayed update, and each loss after the first carries both ranks' gradients.
STEPS = 4


def _queue() -> list[str]:
    """Job ids in the cluster's queue (``squeue``)."""
    return subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, text=True,
                          check=True).stdout.split()


def _sleeping_job(run_dir: Path, tiny_assets, command: str = "sleep 600"):
    """A rendered 2-node Slurm job whose nodes run ``command`` under titanflow.launch.node instead of torchrun: the
    engine's own handling of a job, without training."""
    rendered = render(ScenarioRun(steps=3, nnodes=2, nproc_per_node=1), tiny_assets.weights_dir, run_dir)
    script = Path(rendered.job_path).with_name("launch.sh")
    *head, srun = script.read_text().splitlines()
    script.write_text("\n".join([*head, srun[:srun.index(" -- ") + 4] + command]) + "\n")
    return rendered


def _sleeps_left() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == ["sleep", "600"]]


def test_the_cluster_comes_up_answers_srun_on_both_nodes_and_goes_down_leaving_nothing(tmp_path_factory):
    """A cluster of its own (beside the session's, on other ports): every daemon it recorded is gone after down,
    and no process names its folder."""
    import tempfile

    from titanflow.launch.slurm import cluster as slurm

    folder = Path(tempfile.mkdtemp(prefix="titanflow-slurm-own-", dir="/tmp"))
    started = time.time()
    running = slurm.up(folder, tie_to_caller=True)
    try:
        assert [d.name for d in running.daemons] == ["munged", "slurmctld", "slurmd-n1", "slurmd-n2"]
        said = subprocess.run(["srun", "--nodes=2", "--ntasks=2", "bash", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, **running.env()})
        assert sorted(said.stdout.splitlines()) == ["0 n1", "1 n2"], said.stderr
        started_by_daemons = [c for d in running.daemons for c in psutil.Process(d.pid).children(recursive=True)]
        assert "slurmscriptd" in [c.name() for c in started_by_daemons]  # slurmctld's helper, stopped with it
    finally:
        stopped = slurm.down(folder)
    assert {d.pid for d in stopped} == {d.pid for d in running.daemons}
    assert not any(psutil.pid_exists(d.pid) and psutil.Process(d.pid).status() != psutil.STATUS_ZOMBIE
                   for d in running.daemons)
    # every process the daemons had started is gone, and none names the folder (a cluster on the other worker may
    # have its own slurmscriptd: it is not this one's)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in started_by_daemons)
    left = [p for p in psutil.process_iter(["cmdline", "create_time", "name"]) if p.info["create_time"] >= started - 1
            and str(folder) in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
    assert slurm.read_cluster(folder) is None
    shutil.rmtree(folder)  # its folder is the test's own (the session's cluster folder is the fixture's to remove)


def test_slurm_refuses_more_nodes_than_it_has_and_an_unknown_partition_before_anything_runs(slurm_cluster,
                                                                                              monkeypatch):
    """``sbatch --test-only`` at preflight: the run never gets a folder, the message is Slurm's own."""
    from titanflow.run.preflight import preflight

    with pytest.raises(ValueError, match=r"^nnodes: slurm: Slurm refuses 3 node\(s\) on the default partition: .*"
                                         r"Requested node configuration is not available"):
        preflight(ScenarioRun(nnodes=3, nproc_per_node=1, global_batch_size=3))
    monkeypatch.setenv("TITANFLOW_SLURM_PARTITION", "gpu")
    with pytest.raises(ValueError, match="on partition gpu: .*invalid partition specified: gpu"):
        preflight(ScenarioRun(nnodes=2, nproc_per_node=1))
    assert _queue() == []


def test_a_job_past_its_timeout_and_one_interrupted_are_cancelled_on_every_node(slurm_cluster, tmp_path, tiny_assets):
    from titanflow.launch.slurm.job import run_job

    rendered = _sleeping_job(tmp_path / "timeout", tiny_assets)
    result = run_job(rendered, timeout_s=5, log_path=tmp_path / "timeout" / "train.log")
    log = (tmp_path / "timeout" / "train.log").read_text()
    assert result.timed_out and "killed after the 5 s timeout: scancel" in log
    assert re.search(r"slurm job \d+ ended CANCELLED", log)
    assert _queue() == [] and _sleeps_left() == []

    rendered = _sleeping_job(tmp_path / "interrupt", tiny_assets)
    log_path = tmp_path / "interrupt" / "train.log"
    interrupter = threading.Thread(target=lambda: (wait_until(lambda: log_path.is_file() and "RUNNING" in log_path.read_text(), 120,
                                                              "the job's start"), _thread.interrupt_main()))
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C, as a Prefect cancel's signal reaches the train task
        run_job(rendered, timeout_s=300, log_path=log_path)
    interrupter.join()
    assert re.search(r"interrupted: scancel \d+", log_path.read_text())
    assert _queue() == [] and _sleeps_left() == []


def test_a_slurm_job_waits_for_the_training_slot_of_a_host_its_nodes_run_on(slurm_cluster, prefect_api, tmp_path,
                                                                             tiny_assets):
    """Both nodes of the loopback cluster are this machine: while another run holds this machine's training slot
    (as a one-node training does), a job taking its nodes' slots (titanflow.prefect_ops.slot.node_slots, as the train
    task does) is not even submitted; it is once the slot is free, pinned to the nodes whose slots it holds."""
    import datetime

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from titanflow.prefect_ops.slot import node_slots, training_slot
    from titanflow.launch.slurm.job import job_state, run_job

    rendered = _sleeping_job(tmp_path / "queued", tiny_assets, command="true")
    held, seen = threading.Event(), {}

    def other_run() -> None:
        with temporary_settings({PREFECT_API_URL: prefect_api}), training_slot(run_id="one-node-run"):
            held.set()
            time.sleep(8)
            seen["queue_while_held"] = _queue()
            seen["released_at"] = datetime.datetime.now().replace(microsecond=0)

    holder = threading.Thread(target=other_run)
    holder.start()
    held.wait(60)
    with temporary_settings({PREFECT_API_URL: prefect_api}):
        result = run_job(rendered, timeout_s=120, log_path=tmp_path / "queued" / "train.log",
                         hold_nodes=lambda hosts: node_slots(hosts, run_id="queued"))
    holder.join()
    log = (tmp_path / "queued" / "train.log").read_text()
    job_id = re.search(r"slurm job (\d+) .*submitted", log)[1]
    submitted = datetime.datetime.fromisoformat(job_state(job_id)["SubmitTime"])
    assert result.returncode == 0 and seen["queue_while_held"] == []
    assert submitted >= seen["released_at"] - datetime.timedelta(seconds=1)
    assert "nodes n1, n2 (hosts " in log and job_state(job_id)["ReqNodeList"] == "n[1-2]"


def test_two_nodes_of_one_rank_train_the_curve_of_one_node_of_two_step_for_step(slurm_cluster, prefect_api, tmp_path):
    """The qwen3-scenario flow, native cpu random init, on 2 nodes x 1 rank: the same global batch (4, 2 per rank)
    and seed as the golden's 1 node x 2 ranks. Its curve equals the golden at torchtitan's 5 decimals where the
    numerics are the golden's (else within golden_curve's band), and the flow's own golden check passed; export
    and validation as on one node; each node's console in train/nodes/<node>.log and, by node, in the Prefect log;
    nothing left in the queue."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from titanflow.flows.scenario import qwen3_scenario
    from titanflow.record.summary import read_summary

    started = time.monotonic()
    with temporary_settings({PREFECT_API_URL: prefect_api}):
        result = qwen3_scenario(scenario="native", target="cpu", nnodes=2, nproc_per_node=1, steps=STEPS,
                                runs_dir=str(tmp_path), run_id="two-nodes")
    wall_s = time.monotonic() - started
    summary = read_summary(Path(result["summary"]))
    run_dir = tmp_path / "two-nodes"
    assert summary.verdict == "pass", summary.reason
    assert_golden_curve_of_one_node(summary, "two nodes x 1 rank", wall_s, STEPS)
    load = summary.validation.load
    assert load.missing_in_files == ["lm_head.weight"] and load.tied and load.lm_head_is_embedding
    assert load.unexpected == [] and load.missing == []
    assert summary.validation.parity.top1_agreement == 1.0  # the export gives the trained model's logits
    job = summary.parameters
    assert (job["nnodes"], job["nproc_per_node"]) == (2, 1)
    nodes = run_dir / "train" / "nodes"
    for node in ("n1", "n2"):
        assert re.search(r"\[default[01]\]:.*step:\s*1\s", (nodes / f"{node}.log").read_text())
        assert (nodes / f"{node}.exit.json").is_file()
    train_log = (run_dir / "train.log").read_text()
    assert re.search(r"slurm job \d+ ended COMPLETED", train_log) and "node n1: exit 0" in train_log
    assert _queue() == []


def test_a_rank_killed_on_one_node_ends_the_job_on_both_within_the_timeout_as_infrastructure(slurm_cluster, tmp_path,
                                                                                               tiny_assets):
    """Rank 1 (on whichever node c10d put it) SIGKILLed once step 2 is logged: its node's agent fails, srun
    (--kill-on-bad-exit) ends the other node's, the job fails within a minute of the kill (the launch's timeout
    is 600 s), the error names the node and the killed rank, the failure class is infrastructure (the one the
    train task retries), and neither the queue nor this machine keeps anything of the run."""
    from titanflow.judge.failures import classify_failure
    from titanflow.launch.torchrun import TrainingError, run_training

    run_dir = tmp_path / "killed"
    rendered = render(ScenarioRun(steps=6, nnodes=2, nproc_per_node=1), tiny_assets.weights_dir, run_dir)
    seen = {}

    def kill_rank_1() -> None:
        log = run_dir / "train.log"
        wait_until(lambda: log.is_file() and re.search(r"step:\s*2\s", log.read_text(errors="replace")), 300, "step 2")
        rank = rank_process(run_dir, 1)
        seen["node"] = rank.environ().get("SLURMD_NODENAME")
        rank.kill()
        seen["killed_at"] = time.monotonic()

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    with pytest.raises(TrainingError) as failed:
        run_training(rendered, timeout_s=600)
    ended_s = time.monotonic() - seen["killed_at"]
    message = str(failed.value)
    print(f"\nrank 1 killed on {seen['node']}; the job ended {ended_s:.1f} s later")
    assert ended_s < 60
    assert f"root cause (rank 1): node {seen['node']}: Signal 9 (SIGKILL)" in message
    tail = (run_dir / "train.log").read_text()[-20000:]
    assert classify_failure(verdict="fail", failed_task="train", error=message, losses=None,
                            log_tail=tail) == "infrastructure"
    assert re.search(r"slurm job \d+ ended FAILED", tail)
    assert _queue() == [] and run_processes(run_dir) == []
