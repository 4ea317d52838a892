"""The pods of a titanflow Kubernetes job, without a cluster: the launch records they share
(titanflow.launch.kubernetes.pods), each pod's role by its index (titanflow.launch.kubernetes.pod), the render of a job on
Kubernetes (launch.sh of titanflow.launch.kubernetes.launch) and the preflight that refuses a run outside pod 0."""

import json
import subprocess
import sys

import pytest

from titanflow import paths
from titanflow.launch.kubernetes import pods
from titanflow.launch.kubernetes.pod import main as pod_main
from titanflow.launch.kubernetes.pod import run_agent
from titanflow.params import ScenarioRun
from titanflow.run.preflight import check_pod_zero


@pytest.fixture()
def in_pod(tmp_path, monkeypatch):
    """This process as pod ``index`` of job ``uid-1``, its records under tmp_path."""
    monkeypatch.setenv(pods.PODS_DIR_ENV, str(tmp_path / "pods"))
    monkeypatch.setenv(pods.GROUP_ENV, "uid-1")

    def at(index: int) -> None:
        monkeypatch.setenv(pods.INDEX_ENV, str(index))

    return at


def test_launches_are_numbered_with_a_rendezvous_id_each_and_cancel_and_end_are_recorded(in_pod):
    first = pods.write_launch("uid-1", {"endpoint": "10.0.0.5:4100"})
    second = pods.write_launch("uid-1", {"endpoint": "10.0.0.5:4200"})
    assert (first["launch"], first["rdzv_id"], second["launch"], second["rdzv_id"]) == (1, "uid-1-1", 2, "uid-1-2")
    assert pods.launches("uid-1") == {1: first, 2: second} and pods.launches("uid-2") == {}
    assert not pods.cancelled("uid-1", 1)
    pods.cancel("uid-1", 1)
    assert pods.cancelled("uid-1", 1) and not pods.cancelled("uid-1", 2)
    assert pods.finished("uid-1") is None
    pods.finish("uid-1", 3)
    assert pods.finished("uid-1") == 3
    assert not list(pods.group_dir("uid-1").glob(".*.tmp"))  # written atomically: no temporary left


def test_pod_zero_runs_the_flow_command_and_records_its_exit_for_the_agents(in_pod, capsys):
    """Its SIGTERM and SIGINT go to the flow while it runs, and the caller's handlers are back after (an
    in-process caller keeps its Ctrl-C)."""
    import signal

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    in_pod(0)
    assert pod_main(["--", sys.executable, "-c", "raise SystemExit(4)"]) == 4
    assert pods.finished("uid-1") == 4
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    in_pod(1)
    assert pod_main(["--", "true"]) == 1  # an agent of a flow that exited 4
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_flow_command_the_image_lacks_ends_pod_zero_with_127_and_the_agents_with_it(in_pod, capsys):
    in_pod(0)
    assert pod_main(["--", "/nonexistent/prefect", "flow-run", "execute"]) == 127
    assert pods.finished("uid-1") == 127
    assert "the flow-run command cannot start: [Errno 2] No such file or directory" in capsys.readouterr().out


def test_an_agents_wait_limit_that_is_no_number_is_refused(in_pod, monkeypatch, capsys):
    in_pod(1)
    monkeypatch.setenv("TITANFLOW_POD_WAIT_S", "abc")
    assert pod_main(["--", "true"]) == 2
    assert "TITANFLOW_POD_WAIT_S is 'abc': give seconds (a number), or leave it unset" in capsys.readouterr().err


def test_an_agent_ends_with_the_flow_or_gives_up_when_nothing_comes(in_pod, capsys):
    in_pod(1)
    assert run_agent("uid-1", wait_s=1.5) == 1
    assert "no launch and no end of the flow for 2 s; giving up" in capsys.readouterr().out
    pods.finish("uid-1", 0)
    assert run_agent("uid-1", wait_s=60) == 0


def test_a_process_that_is_no_pod_is_told_what_is_missing(monkeypatch, capsys):
    monkeypatch.delenv(pods.GROUP_ENV, raising=False)
    assert pod_main(["--", "true"]) == 2
    assert "TITANFLOW_POD_GROUP is not set" in capsys.readouterr().err
    assert pod_main(["true"]) == 2  # no "--"


def test_a_run_on_kubernetes_is_refused_outside_pod_zero_naming_the_field(in_pod, monkeypatch):
    monkeypatch.delenv(pods.INDEX_ENV, raising=False)
    with pytest.raises(ValueError, match=r"^scheduler: kubernetes trains from pod 0 .*JOB_COMPLETION_INDEX is ''.*"
                                         r"fix: run it through the trn2-eks work pool"):
        check_pod_zero(2)
    in_pod(1)
    with pytest.raises(ValueError, match="^scheduler: this is pod 1 of the Kubernetes job"):
        check_pod_zero(2)
    in_pod(0)
    check_pod_zero(2)
    monkeypatch.setenv(pods.POD_COUNT_ENV, "2 ")  # the template's nnodes, the Indexed Job's completions
    check_pod_zero(2)
    with pytest.raises(ValueError, match=r"^nnodes: the run asks for 4 nodes but its Kubernetes job has 2 pods; fix: "
                                         r"give the flow run the job variable nnodes=4"):
        check_pod_zero(4)


def test_a_job_on_kubernetes_renders_the_launch_every_pod_runs(tmp_path, tiny_assets):
    """job.json says kubernetes (it is not the implied scheduler); the torchrun line is the multi-node one with the
    per-node placeholders; launch.sh runs it under titanflow.launch.node and stops, naming what is missing, when
    the launch record's rendezvous is not given."""
    from titanflow.launch.render import NODE_PLACEHOLDERS, render

    run = ScenarioRun(steps=3, nnodes=2, nproc_per_node=1, scheduler="kubernetes")
    assert run.scheduler_resolved == "kubernetes"
    rendered = render(run, tiny_assets.weights_dir, tmp_path / "run")
    assert rendered.scheduler == "kubernetes"
    assert json.loads((tmp_path / "run" / "job" / "job.json").read_text())["scheduler"] == "kubernetes"
    assert "--standalone" not in rendered.argv and f"--rdzv-id={NODE_PLACEHOLDERS['rdzv_id']}" in rendered.argv
    script = (tmp_path / "run" / "job" / "launch.sh").read_text()
    assert f"exec python -m titanflow.launch.node {tmp_path / 'run' / 'train' / 'nodes'} -- python -m titan_cfg.forked_torchrun --nnodes=2" in script
    said = subprocess.run(["bash", str(tmp_path / "run" / "job" / "launch.sh")], capture_output=True, text=True,
                          cwd=paths.REPO_ROOT, env={"PATH": "/usr/bin:/bin"})
    assert said.returncode != 0 and "TITANFLOW_RDZV_ENDPOINT: the launch record of pod 0 sets it" in said.stderr
