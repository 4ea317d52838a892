"""titanflow.launch.node: what each node of a multi-node job runs, here without Slurm (the variables Slurm sets given
by hand): placeholders expanded from the node's environment, the console into <node>.log, the exit recorded."""

import json
import os
import signal
import sys

import pytest

from titanflow.launch.node import NodeError, exit_record, expand, log_path, main


def test_placeholders_take_the_nodes_values_and_a_missing_one_is_named():
    env = {"SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "17"}
    assert expand(["--log-dir", "/r/ranks/${SLURMD_NODENAME}", "--rdzv-id=${SLURM_JOB_ID}", "$HOME"], env) == [
        "--log-dir", "/r/ranks/n2", "--rdzv-id=17", "$HOME"]  # only ${NAME} is a placeholder
    with pytest.raises(NodeError, match=r"\$\{TITANFLOW_RDZV_ENDPOINT\}"):
        expand(["--rdzv-endpoint=${TITANFLOW_RDZV_ENDPOINT}"], env)


def test_a_node_records_its_exit_code_and_its_console(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    before = signal.getsignal(signal.SIGTERM)
    code = main([str(tmp_path), "--", sys.executable, "-c", "import os; print(os.environ['SLURMD_NODENAME']); "
                 "raise SystemExit(3)"])
    record = json.loads(exit_record(tmp_path, "n1").read_text())
    assert code == 3 and (record["node"], record["exit_code"], record["signal"]) == ("n1", 3, None)
    assert record["peak_rss_bytes"] > 1_000_000  # a Python interpreter's resident set, from wait4 (KiB x 1024)
    assert log_path(tmp_path, "n1").read_text() == "n1\n"
    assert signal.getsignal(signal.SIGTERM) == before  # called in-process (pod 0's launcher), its SIGTERM is back


def test_an_agent_killed_by_a_signal_is_recorded_as_such(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    code = main([str(tmp_path), "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    record = json.loads(exit_record(tmp_path, "n2").read_text())
    assert code == 128 + signal.SIGKILL and (record["exit_code"], record["signal"]) == (137, "SIGKILL")


def test_an_unset_placeholder_is_written_to_the_console_and_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.delenv("TITANFLOW_RDZV_ENDPOINT", raising=False)
    assert main([str(tmp_path), "--", "torchrun", "--rdzv-endpoint=${TITANFLOW_RDZV_ENDPOINT}"]) == 2
    assert "${TITANFLOW_RDZV_ENDPOINT}, which is not set on node n1" in log_path(tmp_path, "n1").read_text()
    assert json.loads(exit_record(tmp_path, "n1").read_text())["exit_code"] == 2
    assert os.environ["SLURMD_NODENAME"] == "n1"


def test_a_pods_name_comes_before_slurms_and_fills_the_node_placeholder(tmp_path, monkeypatch):
    """TITANFLOW_NODE (set from the pod's name, titanflow.launch.kubernetes.template) names the node; the launch line's
    ``${TITANFLOW_NODE}`` (titanflow.launch.render.NODE_PLACEHOLDERS) takes the name, Slurm's or the pod's."""
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.setenv("TITANFLOW_NODE", "job-x-1")
    code = main([str(tmp_path), "--", sys.executable, "-c", "import sys; print(sys.argv[1])", "ranks/${TITANFLOW_NODE}"])
    assert code == 0 and log_path(tmp_path, "job-x-1").read_text() == "ranks/job-x-1\n"
    monkeypatch.delenv("TITANFLOW_NODE")
    assert main([str(tmp_path), "--", sys.executable, "-c", "import sys; print(sys.argv[1])", "${TITANFLOW_NODE}"]) == 0
    assert log_path(tmp_path, "n1").read_text() == "n1\n"
