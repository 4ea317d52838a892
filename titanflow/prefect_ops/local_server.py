"""A temporary Prefect server for one command-line run, and a health check for a given one.

Why not Prefect's own temporary server (started implicitly when no
``PREFECT_API_URL`` is set): it runs in the terminal's process group, so Ctrl-C
kills it mid-run and the interrupted flow then spends minutes retrying a dead
API before it exits. This one is Prefect's public ``prefect server start``
(SQLite under ``PREFECT_HOME``, the UI included) in a session of its own: Ctrl-C
stops the flow, the flow reports its final state, and only then is the server stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Callable, Iterator

import httpx

from titanflow.launch.process import dies_with_this_thread, stop_group
from titanflow.prefect_ops.database_revision import check_database, record_database


class ServerError(RuntimeError):
    """The Prefect API could not be reached or started; the message names the setting."""


def api_healthy(api_url: str, timeout_s: float = 5.0) -> bool:
    """True when ``<api_url>/health`` answers 200 within ``timeout_s`` seconds."""
    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def prefect_home() -> Path:
    """PREFECT_HOME as Prefect will resolve it in this process: the environment variable, else ``home``
    of ``prefect.toml`` in the working directory (the repository's sets ``.prefect``), else
    ``~/.prefect``. Read without importing prefect, which would fix its settings before the command
    line has set ``PREFECT_API_URL``."""
    if os.environ.get("PREFECT_HOME"):
        return Path(os.environ["PREFECT_HOME"]).expanduser()
    toml = Path("prefect.toml")
    home = tomllib.loads(toml.read_text()).get("home") if toml.is_file() else None
    return Path(home).expanduser() if home else Path.home() / ".prefect"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: titanflow's record, in PREFECT_HOME, that a server start there registered Prefect's block types
#: (:func:`block_types_registered`).
BLOCK_TYPES_RECORD = "titanflow-block-types.json"

#: The settings that start a server without registering block types: registration off, and its memo check off too,
#: since that check imports every installed Prefect collection before it looks at the memo.
SKIP_BLOCK_REGISTRATION = {"PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
                           "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false"}


def _installed_collections() -> list[list[str]]:
    """``[name, version]`` of prefect and of every installed distribution with a ``prefect.collections`` entry
    point (the packages whose block types a server start registers), sorted."""
    from importlib.metadata import entry_points, version

    found = {(ep.dist.name, ep.dist.version) for ep in entry_points(group="prefect.collections") if ep.dist}
    return [["prefect", version("prefect")], *sorted([name, ver] for name, ver in found)]


def _memo_store(home: Path) -> Path:
    """Where the server keeps the memo of its last block registration: PREFECT_SERVER_MEMO_STORE_PATH (or its older
    name PREFECT_MEMO_STORE_PATH), else ``memo_store.toml`` in PREFECT_HOME (Prefect's default)."""
    given = os.environ.get("PREFECT_SERVER_MEMO_STORE_PATH") or os.environ.get("PREFECT_MEMO_STORE_PATH")
    return Path(given).expanduser() if given else home / "memo_store.toml"


def _registration_memo(home: Path) -> str | None:
    """The block registration hash the server last wrote to its memo store, None when it wrote none."""
    try:
        return tomllib.loads(_memo_store(home).read_text()).get("block_auto_registration")
    except (OSError, tomllib.TOMLDecodeError):
        return None


def _registration(home: Path) -> dict | None:
    """What decides whether block types need registering in ``home``: the installed collections, the database
    setting (unset: the SQLite file in PREFECT_HOME) and the server's memo; None when the server wrote no memo."""
    memo = _registration_memo(home)
    if memo is None:
        return None
    database = os.environ.get("PREFECT_SERVER_DATABASE_CONNECTION_URL") or os.environ.get(
        "PREFECT_API_DATABASE_CONNECTION_URL")
    return {"collections": _installed_collections(), "database": database, "memo": memo}


def block_types_registered(home: Path) -> bool:
    """True when a server start in ``home`` (PREFECT_HOME) registered the block types of the Prefect collections
    installed now, in the database configured now, and the server's own memo of that registration is unchanged
    since (:func:`record_block_types`).

    Why: a ``prefect server start`` hashes the block registry on every start to decide whether to register block
    types again, and building that registry imports every installed collection (here prefect-kubernetes and the
    kubernetes client): about a fifth of the start (py-spy of ``prefect server start``, existing database,
    2026-12-02). A temporary server started where that registration is already done skips it
    (:data:`SKIP_BLOCK_REGISTRATION`); any change of prefect, of a collection, or of the memo registers again.
    """
    try:
        recorded = json.loads((home / BLOCK_TYPES_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return recorded == _registration(home)


def record_block_types(home: Path) -> None:
    """Record, after a server start that registered block types has answered (its start-up ran the registration
    before it took requests), what :func:`block_types_registered` compares; nothing when the server wrote no memo."""
    registration = _registration(home)
    if registration is not None:
        (home / BLOCK_TYPES_RECORD).write_text(json.dumps(registration))


@contextlib.contextmanager
def temporary_server(log_path: Path, startup_timeout_s: float = 90.0,
                     while_starting: Callable[[str], None] | None = None) -> Iterator[str]:
    """Run ``prefect server start`` on a free loopback port; yield its API URL; stop it on exit.
    ``while_starting(api_url)`` runs while the server starts (the caller's own imports: they overlap the
    server's start-up instead of following it).

    Startup took 5-14 s on a 2-core machine (fresh vs existing SQLite database). Block types are registered
    only when :func:`block_types_registered` says the server's home lacks them. A database a newer Prefect migrated is
    refused before the server starts (titanflow.prefect_ops.database_revision), and the revision each start leaves is
    recorded beside it.

    Raises:
        NewerDatabase: the home's database was migrated by a newer Prefect than the installed one (nothing started).
        ServerError: the server exited or did not answer within ``startup_timeout_s``.
    """
    home = prefect_home()
    check_database(home)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    prefect_cli = Path(sys.executable).parent / "prefect"
    registered = block_types_registered(home)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(prefect_cli), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PREFECT_API_URL": api_url, **(SKIP_BLOCK_REGISTRATION if registered else {})},
            preexec_fn=dies_with_this_thread(),  # a SIGTERM or SIGKILL of this process skips the finally below
        )
    try:
        deadline = time.monotonic() + startup_timeout_s
        if while_starting is not None:
            while_starting(api_url)
        while not api_healthy(api_url, timeout_s=1.0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ServerError(f"the temporary Prefect server did not start; its log: {log_path}")
            time.sleep(0.05)  # a refused connection costs microseconds: poll often, so no start is waited on long
        if not registered:
            record_block_types(home)
        record_database(home)
        yield api_url
    finally:
        stop_group(proc.pid, grace_s=15)
        proc.wait()
