"""titanflow.prefect_ops.server without a Prefect server: what ``make stop`` ends and what ``make server`` refuses
(seconds; the full start/stop against Prefect is in tests/e2e/test_deployments.py)."""

from __future__ import annotations

import os
import socket
import sys
import time

import psutil
import pytest

from titanflow.prefect_ops import server
from titanflow.prefect_ops.local_server import ServerError

# A stand-in for a worker whose flow run lives in a session of its own, as Prefect's runner starts it.
_LEADER_WITH_DETACHED_CHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
    "time.sleep(300)\n"
)


def _children(pid: int, count: int, timeout_s: float = 20) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while len(found := psutil.Process(pid).children(recursive=True)) < count:
        assert time.monotonic() < deadline, "the stand-in process did not start its child"
        time.sleep(0.1)
    return found


def test_stop_ends_recorded_processes_and_their_children_in_other_sessions(tmp_path):
    leader = server._spawn("worker", [sys.executable, "-c", _LEADER_WITH_DETACHED_CHILD],
                           tmp_path / "worker.log", server.prefect_env(tmp_path, "http://127.0.0.1:9/api"))
    server.ServerState(api_url="http://127.0.0.1:9/api", home=str(tmp_path), processes=[leader]).save()
    (child,) = _children(leader.pid, 1)
    # Popen's child calls setsid between its fork and its exec: on a loaded machine the fork is seen first
    deadline = time.monotonic() + 20
    while os.getsid(child.pid) == os.getsid(leader.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getsid(child.pid) != os.getsid(leader.pid)  # out of reach of a process-group signal

    ended = server.stop(tmp_path, grace_s=5)

    assert sorted(ended) == sorted([leader.pid, child.pid])
    assert not psutil.pid_exists(child.pid) or psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
    assert server.alive(leader) is None
    assert server.ServerState.load(tmp_path) is None  # the record is gone with the processes


def test_stop_with_nothing_recorded_or_only_dead_processes_ends_nothing(tmp_path):
    assert server.stop(tmp_path) == []
    # the recorded PID now belongs to another process (this one): its start time differs, it is left alone
    gone = server.Started("server", pid=os.getpid(), create_time=0.0, log="")
    server.ServerState(api_url="http://127.0.0.1:9/api", home=str(tmp_path), processes=[gone]).save()
    assert server.stop(tmp_path) == []
    assert server.ServerState.load(tmp_path) is None


def test_start_refuses_a_port_in_use_naming_the_option(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServerError, match=r"port: 127\.0\.0\.1:\d+ is in use.*make server PORT=<port>.*--port"):
            server.start(tmp_path, port=taken.getsockname()[1])
    assert server.ServerState.load(tmp_path) is None


def test_deployment_plan_reads_pools_and_entrypoints_from_prefect_yaml(tmp_path):
    (tmp_path / "prefect.yaml").write_text(
        "deployments:\n"
        "  - {name: a, entrypoint: flows/scenario.py:qwen3_scenario, work_pool: {name: cpu}}\n"
        "  - {name: b, entrypoint: flows/absent.py:nothing, work_pool: {name: trn2}}\n")
    assert server.deployment_plan(tmp_path / "prefect.yaml") == (["cpu", "trn2"], ["a"], ["b"])


@pytest.mark.fault
def test_the_temporary_server_ends_with_the_process_that_started_it(tmp_path):
    """SIGKILL (or an unhandled SIGTERM) of `titanflow run` skips its `finally`: the temporary server it
    started must still end (PR_SET_PDEATHSIG), not stay up under init."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    script = ("import sys, time\nfrom pathlib import Path\nfrom titanflow.prefect_ops.local_server import "
              "temporary_server\nwith temporary_server(Path(sys.argv[1])) as url:\n    print(url, flush=True)\n"
              "    time.sleep(600)\n")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home")}
    runner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "server.log")], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        runner.stdout.readline()  # the server answered
        (server,) = psutil.Process(runner.pid).children()
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 20
        while server.is_running() and server.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    finally:
        if runner.poll() is None:
            runner.kill()


def test_the_callers_imports_run_while_the_temporary_server_starts_with_its_url_set(tmp_path, monkeypatch):
    """titanflow run imports its flow module while the temporary server starts (titanflow.cli._with_api): the
    import sees the server's URL (Prefect reads it at import) before the server answers, and it is unset after."""
    from titanflow import cli
    from titanflow.prefect_ops import local_server

    seen = {}

    def while_starting_probe(api_url: str) -> None:
        seen["url_at_import"] = os.environ.get("PREFECT_API_URL")
        seen["healthy_at_import"] = local_server.api_healthy(api_url, timeout_s=0.2)

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    real_import = cli.importlib.import_module

    def import_module(name, *args, **kwargs):  # the flow module probed; any other import (the server's own, lazily) made
        if name != "titanflow.flows.scenario":
            return real_import(name, *args, **kwargs)
        return while_starting_probe(os.environ["PREFECT_API_URL"])

    monkeypatch.setattr(cli.importlib, "import_module", import_module)
    reached, url = cli._with_api(lambda: os.environ["PREFECT_API_URL"], imports=("titanflow.flows.scenario",))
    assert reached and seen["url_at_import"] == url and seen["healthy_at_import"] is False
    assert "PREFECT_API_URL" not in os.environ


def test_make_server_and_make_stop_take_an_exported_prefect_home(monkeypatch, tmp_path):
    """Prefect's own commands read PREFECT_HOME before prefect.toml; the server's start and stop do the same, so a
    user's exported home holds the database, logs and process record, and stop finds what start recorded."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    assert server.default_home() == tmp_path / "home"
    monkeypatch.delenv("PREFECT_HOME")
    assert server.default_home() == server.DEFAULT_HOME
