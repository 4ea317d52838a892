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


@contextlib.contextmanager
def temporary_server(log_path: Path, startup_timeout_s: float = 90.0,
                     while_starting: Callable[[str], None] | None = None) -> Iterator[str]:
    """Run ``prefect server start`` on a free loopback port; yield its API URL; stop it on exit.
    ``while_starting(api_url)`` runs while the server starts (the caller's own imports: they overlap the
    server's start-up instead of following it).

    Startup took 5-14 s on a 2-core machine (fresh vs existing SQLite database).

    Raises:
        ServerError: the server exited or did not answer within ``startup_timeout_s``.
    """
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    prefect_cli = Path(sys.executable).parent / "prefect"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(prefect_cli), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PREFECT_API_URL": api_url},
            preexec_fn=dies_with_this_thread(),  # a SIGTERM or SIGKILL of this process skips the finally below
        )
    try:
        deadline = time.monotonic() + startup_timeout_s
        if while_starting is not None:
            while_starting(api_url)
        while not api_healthy(api_url, timeout_s=1.0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ServerError(f"the temporary Prefect server did not start; its log: {log_path}")
            time.sleep(0.25)
        yield api_url
    finally:
        stop_group(proc.pid, grace_s=15)
        proc.wait()
