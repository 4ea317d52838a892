"""A long-lived local Prefect server with titanflow's work pools, deployments and a cpu worker.

    python -m titanflow.prefect_ops.server start     # `make server`: server, pools, deployments, worker
    python -m titanflow.prefect_ops.server status    # what is running, and the URLs
    python -m titanflow.prefect_ops.server stop      # `make stop`: ends exactly what `start` started

``start`` runs Prefect's own pieces, in order: ``prefect server start --host 127.0.0.1`` (SQLite
under the project folder ``.prefect/``, the UI included), the work pools of
``deployments/prefect.yaml`` (type ``process``, created when missing), ``prefect --no-prompt
deploy`` of that file, the alert automations (titanflow.prefect_ops.alerts: on when
``TITANFLOW_ALERT_WEBHOOK_URL`` or ``TITANFLOW_ALERT_BLOCK`` is set), and ``prefect worker start
--pool cpu``. The server and the worker each run in a session of their own (a worker started with
``&`` from a non-interactive shell would ignore SIGINT/SIGTERM), and their PIDs and start times
are recorded in ``.prefect/titanflow-server.json``. ``stop`` signals those process groups, then
every process they had started (flow runs and their torchrun ranks run in sessions of their own),
so nothing is left behind. Startup is idempotent: a second ``start`` reports the running one
(after setting its alerts up again, as the environment now says).

Each stage's seconds are measured at every start and kept in the record (``ServerState.timings_s``);
``make server`` and ``status`` print them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import yaml

from titanflow.launch.kubernetes.template import template_path
from titanflow.launch.process import alive, start_ticks, stop_group
from titanflow.paths import REPO_ROOT, write_atomic
from titanflow.prefect_ops.alerts import alert_setting, ensure_alerts
from titanflow.prefect_ops.deployments import PREFECT_YAML, WORK_POOLS, check_prefect_yaml
from titanflow.prefect_ops.local_server import ServerError, api_healthy, free_port
from titanflow.prefect_ops.slot_holder import release_stale_slots

#: The project's Prefect home: SQLite database, logs, the record of started processes (git-ignored).
DEFAULT_HOME = REPO_ROOT / ".prefect"
#: Prefect's default port, so the UI is where Prefect's documentation says it is.
DEFAULT_PORT = 4200
#: The pool whose worker runs on this machine; the other pools get their workers elsewhere (trn2: the node).
LOCAL_POOL = "cpu"
STATE_FILE = "titanflow-server.json"
PREFECT_CLI = Path(sys.executable).parent / "prefect"


@dataclass
class Started:
    """One process ``start`` launched: ``pid`` leads its own process group; ``start_ticks`` (clock ticks after boot,
    titanflow.launch.process.start_ticks; None in a record of an older titanflow) or else ``create_time`` (seconds since
    the epoch, psutil's) tells it apart from a later process reusing the PID."""

    role: str
    pid: int
    create_time: float
    log: str
    start_ticks: int | None = None


@dataclass
class ServerState:
    """What ``start`` set up, as recorded in ``<home>/titanflow-server.json``.

    ``timings_s`` holds measured seconds: ``server_health`` (start to /api/health answering),
    ``work_pools``, ``deploy``, ``alerts``, ``worker_ready`` (worker start to its first heartbeat);
    ``released_slots`` the training slots found still taken at start and freed; ``alerts`` where the
    nightly's alerts go, or that they are off (titanflow.prefect_ops.alerts.ensure_alerts).
    """

    api_url: str
    home: str
    processes: list[Started] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    released_slots: list[str] = field(default_factory=list)
    alerts: str = ""

    @property
    def ui_url(self) -> str:
        """The Prefect UI, served by the same server at its root."""
        return self.api_url.removesuffix("/api")

    def save(self) -> None:
        """Write the record atomically (a half-written record would orphan processes)."""
        write_atomic(Path(self.home) / STATE_FILE, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, home: Path) -> "ServerState | None":
        """The record in ``home``, or None when nothing was started there."""
        path = Path(home) / STATE_FILE
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        raw["processes"] = [Started(**p) for p in raw["processes"]]
        return cls(**raw)


def prefect_env(home: Path, api_url: str) -> dict[str, str]:
    """Environment for every Prefect command ``start`` runs: this home and server, no client telemetry.

    The settings correctness depends on (lease storage, server analytics off) come from the
    repository's prefect.toml: every command runs from the repository root, as any other way of
    starting the server should. ``TITANFLOW_ROOT`` is where a flow run starts (the pull step of
    deployments/prefect.yaml).
    """
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api_url, "DO_NOT_TRACK": "1",
            "TITANFLOW_ROOT": str(REPO_ROOT)}


def _spawn(role: str, argv: list[str], log_path: Path, env: dict[str, str]) -> Started:
    """Start ``argv`` in a new session (its own process group), output appended to ``log_path``."""
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=REPO_ROOT, env=env, start_new_session=True)
    return Started(role, popen.pid, psutil.Process(popen.pid).create_time(), str(log_path), start_ticks(popen.pid))


def _wait_for(what: str, ready, proc: Started, timeout_s: float) -> float:
    """Poll ``ready()`` every 0.25 s until true; returns the seconds waited.

    Raises:
        ServerError: ``proc`` exited, or ``timeout_s`` passed (the message names its log).
    """
    t0 = time.monotonic()
    while not ready():
        if alive(proc) is None:
            raise ServerError(f"{proc.role} exited before {what}; its log: {proc.log}")
        if time.monotonic() - t0 > timeout_s:
            raise ServerError(f"{what}: not within {timeout_s:.0f} s; the {proc.role} log: {proc.log}")
        time.sleep(0.25)
    return time.monotonic() - t0


def _prefect(args: list[str], env: dict[str, str]) -> str:
    """Run one ``prefect`` command from the repository root; returns its output.

    Raises:
        ServerError: non-zero exit, with the command and its output.
    """
    done = subprocess.run([str(PREFECT_CLI), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise ServerError(f"`prefect {' '.join(args)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def deployment_plan(prefect_yaml: Path = PREFECT_YAML) -> tuple[list[str], list[str], list[str]]:
    """(work pools, deployable deployment names, names skipped because their entrypoint file is
    missing) of a prefect.yaml; entrypoint files are looked up from the repository root."""
    config = yaml.safe_load(prefect_yaml.read_text())
    pools, ready, skipped = [], [], []
    for deployment in config["deployments"]:
        if deployment["work_pool"]["name"] not in pools:
            pools.append(deployment["work_pool"]["name"])
        entry_file = deployment["entrypoint"].split(":")[0]
        (ready if (REPO_ROOT / entry_file).is_file() else skipped).append(deployment["name"])
    return pools, ready, skipped


def ensure_work_pools(api_url: str, pools: list[str], env: dict[str, str]) -> list[str]:
    """Create each missing pool with ``prefect work-pool create NAME --type process``, or for a pool whose record
    (titan_cfg.targets.WorkPool) is of another kind, of that type with its template file as the base job template;
    returns the ones created (existing pools, and settings made on them, are left as they are)."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    created = []
    with SyncPrefectClient(api_url) as client:
        for pool in pools:
            try:
                client.read_work_pool(pool)
            except ObjectNotFound:
                record = WORK_POOLS[pool][1] if pool in WORK_POOLS else None
                if record is not None and record.kind != "process":
                    client.create_work_pool(WorkPoolCreate(name=pool, type=record.kind, base_job_template=json.loads(
                        template_path(pool).read_text())))
                else:
                    _prefect(["work-pool", "create", pool, "--type", "process"], env)
                created.append(pool)
    return created


def deploy(api_url: str, names: list[str], env: dict[str, str], prefect_yaml: Path = PREFECT_YAML) -> None:
    """``prefect --no-prompt deploy`` of ``names`` from ``prefect_yaml``, then check the server has them.

    Raises:
        ServerError: the deploy failed, or fewer deployments exist than were asked for
            (prefect skips a prefect.yaml it cannot validate with only a warning).
    """
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    flags = [arg for name in names for arg in ("--name", name)]
    output = _prefect(["--no-prompt", "deploy", "--prefect-file", str(prefect_yaml), *flags], env)
    with SyncPrefectClient(api_url) as client:
        found = client.read_deployments(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)))
    missing = set(names) - {d.name for d in found}
    if missing:
        raise ServerError(f"deploy: {sorted(missing)} not on the server after `prefect deploy`:\n{output}")


def _worker_registered(api_url: str, pool: str) -> bool:
    """True once a worker of ``pool`` has sent its first heartbeat."""
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(api_url) as client:
        return len(client.read_workers_for_work_pool(pool)) > 0


def _alerts(api_url: str) -> str:
    """titanflow.prefect_ops.alerts.ensure_alerts on ``api_url``; a bad setting raises ServerError."""
    try:
        return ensure_alerts(api_url)
    except ValueError as err:
        raise ServerError(f"alerts: {err}") from None


def _port_taken(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start(home: Path = DEFAULT_HOME, port: int = DEFAULT_PORT, startup_timeout_s: float = 90.0) -> ServerState:
    """Start server, pools, deployments and the cpu worker (see the module docstring).

    ``port`` 0 picks a free port. Returns the running :class:`ServerState` (the existing one when
    already started from ``home``).

    Raises:
        ServerError: deployments/prefect.yaml lacks a deployment of the registries (names each), the
            port is taken by something else (pass another ``--port``), an alert setting is refused
            (names the variable), or a step failed; whatever had been started is stopped again before
            raising (a server already running is left running).
    """
    home = Path(home).resolve()
    try:
        alert_setting()  # refused before anything starts
    except ValueError as err:
        raise ServerError(f"alerts: {err}") from None
    stale = check_prefect_yaml()
    if stale:
        raise ServerError(f"{PREFECT_YAML} does not hold the deployments of the registries "
                          f"(titanflow.prefect_ops.deployments): {'; '.join(stale)}")
    home.mkdir(parents=True, exist_ok=True)
    previous = ServerState.load(home)
    if previous and all(alive(p) for p in previous.processes) and api_healthy(previous.api_url):
        previous.alerts = _alerts(previous.api_url)
        previous.save()
        return previous
    if previous:
        stop(home)  # a partial or stale start: end what is left of it
    port = port or free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    if _port_taken(port):
        raise ServerError(f"port: 127.0.0.1:{port} is in use by another process; choose a free one: "
                          "make server PORT=<port> (PORT=0: any free port), or --port <port>")
    env = prefect_env(home, api_url)
    state = ServerState(api_url=api_url, home=str(home))
    try:
        t0 = time.monotonic()
        server = _spawn("server", [str(PREFECT_CLI), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                        home / "server.log", env)
        state.processes.append(server)
        state.save()
        _wait_for("the server answering /api/health", lambda: api_healthy(api_url, 1.0), server, startup_timeout_s)
        state.timings_s["server_health"] = time.monotonic() - t0
        # nothing of this server trains yet: a slot still counted from before a stop is stale
        state.released_slots = release_stale_slots(api_url)

        pools, names, _ = deployment_plan()
        t0 = time.monotonic()
        ensure_work_pools(api_url, pools, env)
        state.timings_s["work_pools"] = time.monotonic() - t0
        t0 = time.monotonic()
        deploy(api_url, names, env)
        state.deployments = names
        state.timings_s["deploy"] = time.monotonic() - t0
        t0 = time.monotonic()
        state.alerts = _alerts(api_url)
        state.timings_s["alerts"] = time.monotonic() - t0

        t0 = time.monotonic()
        worker = _spawn("worker", [str(PREFECT_CLI), "worker", "start", "--pool", LOCAL_POOL, "--type", "process"],
                        home / f"worker-{LOCAL_POOL}.log", env)
        state.processes.append(worker)
        state.save()
        _wait_for(f"a worker polling pool {LOCAL_POOL!r}", lambda: _worker_registered(api_url, LOCAL_POOL),
                  worker, startup_timeout_s)
        state.timings_s["worker_ready"] = time.monotonic() - t0
        state.save()
        return state
    except BaseException:
        stop(home)
        raise


def stop(home: Path = DEFAULT_HOME, grace_s: float = 20.0) -> list[int]:
    """End every process ``start`` recorded in ``home`` and every process they started.

    The worker goes first (it must not pick up new runs), then the server. Each gets SIGTERM on
    its process group, then its descendants (taken before signalling: flow runs and torchrun ranks
    live in sessions of their own) get SIGTERM; whatever is alive after ``grace_s`` seconds gets
    SIGKILL. Returns the PIDs that were ended; removes the record.
    """
    state = ServerState.load(Path(home).resolve())
    if state is None:
        return []
    ended: list[psutil.Process] = []
    for started in reversed(state.processes):
        leader = alive(started)
        if leader is None:
            continue
        family = [leader, *leader.children(recursive=True)]  # taken before signalling
        stop_group(leader.pid, grace_s, others=[p.pid for p in family[1:]])
        ended += family
    (Path(state.home) / STATE_FILE).unlink(missing_ok=True)
    return [p.pid for p in ended]


def describe(state: ServerState) -> str:
    """What a user needs after ``make server``: URLs, the export line, the processes and timings."""
    lines = [f"Prefect UI      {state.ui_url}",
             f"Prefect API     {state.api_url}",
             f"deployments     {len(state.deployments)} (flow runs start with: prefect deployment run "
             f"'qwen3-scenario/native-cpu-random' --watch)"]
    lines += [f"alerts          {state.alerts}"] if state.alerts else []
    lines += [f"{p.role:<15} pid {p.pid}, log {p.log}" for p in state.processes]
    lines += [f"timing          {k} {v:.1f} s" for k, v in state.timings_s.items()]
    lines += ["", "Point the prefect command line at this server:", f"export PREFECT_API_URL={state.api_url}"]
    return "\n".join(lines)


def default_home() -> Path:
    """The home ``make server`` and ``make stop`` use: ``$PREFECT_HOME`` when set (as every other Prefect command
    reads it before prefect.toml), else :data:`DEFAULT_HOME`."""
    given = os.environ.get("PREFECT_HOME")
    return Path(given).expanduser() if given else DEFAULT_HOME


def main(argv: list[str] | None = None) -> int:
    """``python -m titanflow.prefect_ops.server {start,status,stop}``; exit 0 on success, 1 on failure."""
    parser = argparse.ArgumentParser(prog="python -m titanflow.prefect_ops.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "status", "stop"])
    parser.add_argument("--home", type=Path, default=default_home(),
                        help="Prefect home: SQLite database, logs, process record (default: $PREFECT_HOME when set, "
                             f"else {DEFAULT_HOME})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"server port on 127.0.0.1, 0 for a free one (default: {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    # Prefect reads its home when first imported (start imports it lazily): this command's is the server's.
    os.environ.update(PREFECT_HOME=str(args.home.resolve()), DO_NOT_TRACK="1")
    if args.command == "start":
        try:
            print(describe(start(args.home, args.port)))
        except ServerError as err:
            print(f"titanflow.prefect_ops.server: {err}", file=sys.stderr)
            return 1
    elif args.command == "status":
        state = ServerState.load(args.home.resolve())
        if state is None:
            print(f"nothing started from {args.home}")
            return 1
        print(describe(state))
    else:
        ended = stop(args.home)
        print(f"stopped {len(ended)} process(es): {' '.join(map(str, ended))}" if ended else "nothing to stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
