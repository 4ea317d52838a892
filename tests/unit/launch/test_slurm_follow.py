"""titanflow.launch.slurm.job's parts that need no cluster: where each line of a launch goes, the node that failed
first, the time limit and the site's settings. The job itself is followed on a real cluster in
tests/e2e/test_slurm_runs.py."""

import io
import json
import math
import shutil

import pytest

from titanflow.launch.nodes import NodeLog, NodeRouter, first_failed, node_exits
from titanflow.launch.process import KILL_GRACE_S
from titanflow.launch.slurm.job import time_limit
from titanflow.launch.slurm.settings import SlurmSettings


def _router():
    log, seen = io.BytesIO(), []
    return NodeRouter(log, seen.extend), log, seen


def test_train_log_gets_the_rank0_nodes_lines_from_its_first_and_the_prefect_log_every_node():
    """Lines are held until a node shows global rank 0 (``[default0]:``); then that node's lines, earlier ones
    included, go to train.log as they are, and the other node's never; the Prefect log gets all, by node."""
    route, log, seen = _router()
    route.node("n1", "agent n1 starting")
    route.node("n2", "agent n2 starting")
    route.node("n2", "[default0]:step:  1  loss: 11.94006")
    route.node("n1", "[default1]:step:  1  loss: 11.94006")
    route.node("n2", "[default0]:step:  2  loss: 11.93394")
    route.scheduler("slurm", "srun: error: n1: task 0: Exited with exit code 1")
    route.say("slurm job 7 ended FAILED")
    with route:  # the end of the launch: the Prefect log's forwarder delivers what it holds
        pass
    assert log.getvalue().decode().splitlines() == [
        "agent n2 starting", "[default0]:step:  1  loss: 11.94006", "[default0]:step:  2  loss: 11.93394",
        "slurm: srun: error: n1: task 0: Exited with exit code 1", "titanflow: slurm job 7 ended FAILED"]
    assert seen[:3] == ["[n1] agent n1 starting", "[n2] agent n2 starting", "[n2] [default0]:step:  1  loss: 11.94006"]
    assert seen[-2:] == ["[slurm] srun: error: n1: task 0: Exited with exit code 1", "titanflow: slurm job 7 ended FAILED"]


def test_lines_of_a_job_that_never_showed_rank_0_reach_train_log_by_node():
    route, log, _ = _router()
    route.node("n1", "RendezvousTimeoutError")
    route.node("n2", "agent n2 starting")
    route.close()
    assert log.getvalue().decode().splitlines() == ["[n1] RendezvousTimeoutError", "[n2] agent n2 starting"]


def test_a_tail_reads_only_what_was_appended_since_it_began_and_holds_a_partial_line(tmp_path):
    path = tmp_path / "n1.log"
    path.write_text("an earlier launch\n")
    tail = NodeLog(path)
    with open(path, "a") as handle:
        handle.write("line 1\npart")
    assert tail.lines() == ["line 1"]
    with open(path, "a") as handle:
        handle.write("ial\nend")
    assert tail.lines() == ["partial"] and tail.lines(final=True) == ["end"]


def test_the_node_that_failed_first_is_the_earliest_non_zero_exit(tmp_path):
    for node, code, ended in (("n1", 0, 10.0), ("n2", 137, 12.0), ("n3", 1, 11.0)):
        (tmp_path / f"{node}.exit.json").write_text(json.dumps({"node": node, "exit_code": code, "signal": None,
                                                                "ended_at": ended, "peak_rss_bytes": 1}))
    exits = node_exits(tmp_path, ["n1", "n2", "n3", "n4"])
    assert exits["n4"] is None  # no record: Slurm ended it before it could write one
    assert first_failed(exits) == "n3"
    assert first_failed({"n1": exits["n1"], "n4": None}) is None


def test_a_node_whose_rank_only_lost_its_peer_did_not_fail_first_even_when_its_agent_exited_first(tmp_path):
    """Rank 1 SIGKILLed on n1: n2's rank 0 loses its peer and its agent exits 1 within milliseconds, before n1's
    agent, which srun then ends with SIGTERM (the race make test met once ranks exited at once). The node that failed
    first is n1: its torchrun names the SIGKILL, n2's rank only lost a peer (titanflow.launch.root_cause)."""
    from helpers import FIXTURES
    from helpers.torchrun_reports import KILLED, child_failed_report

    from titan_cfg.job import Job
    from titanflow.launch.nodes import first_node_error

    nodes = tmp_path / "train" / "nodes"
    nodes.mkdir(parents=True)
    for node, code, signal, ended, report in (("n1", 143, "SIGTERM", 12.0, child_failed_report((1, KILLED), [])),
                                               ("n2", 1, None, 11.0, child_failed_report((0, "Traceback"), []))):
        (nodes / f"{node}.exit.json").write_text(json.dumps({"node": node, "exit_code": code, "signal": signal,
                                                             "ended_at": ended, "peak_rss_bytes": 1}))
        # one rank per node: local rank 0; the report pairs the global rank with it
        (nodes / f"{node}.log").write_text(report.replace("(local_rank: 1)", "(local_rank: 0)"))
        (tmp_path / "train" / "ranks" / node / "launch" / "attempt_0" / "0").mkdir(parents=True)
    # n2's rank 0 wrote gloo's lost connection to its error.json (ranks_killed's rank 0, a real one)
    shutil.copy(FIXTURES / "failure_logs" / "ranks_killed" / "launch" / "attempt_0" / "0" / "error.json",
                tmp_path / "train" / "ranks" / "n2" / "launch" / "attempt_0" / "0")
    exits = node_exits(nodes, ["n1", "n2"])
    assert first_failed(exits) == "n2"  # by exit alone
    assert first_failed(exits, nodes) == "n1"
    job = Job.model_construct(dump_folder=str(tmp_path / "train"))
    root = first_node_error(job)
    assert (root.rank, root.message) == (1, f"node n1: {KILLED}")


def test_the_slurm_time_limit_covers_the_timeout_and_the_cancel_grace():
    assert time_limit(1800) == str(math.ceil((1800 + KILL_GRACE_S) / 60) + 1) == "32"
    assert time_limit(50) == "2"


def test_site_settings_become_sbatch_options_and_a_broken_one_is_named():
    settings = SlurmSettings.from_env({"TITANFLOW_SLURM_PARTITION": "trn2", "TITANFLOW_SLURM_ACCOUNT": "ml",
                                       "TITANFLOW_SLURM_SBATCH_ARGS": "--qos=high --constraint='efa'"})
    assert settings.options() == ["--partition=trn2", "--account=ml", "--qos=high", "--constraint=efa"]
    assert SlurmSettings.from_env({}).options() == []
    with pytest.raises(ValueError, match="TITANFLOW_SLURM_SBATCH_ARGS"):
        SlurmSettings.from_env({"TITANFLOW_SLURM_SBATCH_ARGS": "--comment='open"})
