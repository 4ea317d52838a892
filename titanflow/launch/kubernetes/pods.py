"""How the pods of one titanflow Kubernetes job talk: files in a folder of the shared file system they all mount.

The job (titanflow.launch.kubernetes.template) is an Indexed Job of ``nnodes`` pods. Pod 0 runs the flow; the others run
agents (titanflow.launch.kubernetes.pod). Each training launch of the flow's train task is a numbered record in the job's
folder, ``<pods dir>/<group>/``:

- ``launch-<n>.json``: launch ``n`` (1, 2, ... per retry): the job's ``launch.sh``, the c10d rendezvous endpoint
  (pod 0's address and a free port there), the rendezvous id, the nodes folder. Written once, atomically, by pod 0
  (titanflow.launch.kubernetes.launch) before its own node starts; every agent runs the newest one it has not run.
- ``cancel-<n>``: launch ``n`` is cancelled (the timeout, an interrupt, a Prefect cancel on pod 0): every agent
  ends its node of it.
- ``finished.json``: the flow on pod 0 ended, with its exit code; the agents end.

``<group>`` is the Kubernetes job's uid (the pods' ``batch.kubernetes.io/controller-uid`` label, given to every pod
as ``TITANFLOW_POD_GROUP``): unique per job, so a flow run Prefect submits again gets a fresh folder. Why files and
not the Kubernetes API: the pods share the file system anyway (checkout, run folders), and a pod needs no
service account to read a file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from titanflow import paths

#: The Kubernetes job's uid, the same in every pod of the job (the template's downward API).
GROUP_ENV = "TITANFLOW_POD_GROUP"
#: The pod's index in the Indexed Job (Kubernetes sets it: 0 .. completions - 1).
INDEX_ENV = "JOB_COMPLETION_INDEX"
#: The pod's IP address (the template's downward API, ``status.podIP``): pod 0's is the rendezvous endpoint.
POD_IP_ENV = "TITANFLOW_POD_IP"
#: The job's pod count (its Indexed Job's completions, the work pool's ``nnodes``): a run's nnodes must be it.
POD_COUNT_ENV = "TITANFLOW_POD_COUNT"
#: The shared folder that holds every job's folder; default ``<checkout>/runs/_pods``.
PODS_DIR_ENV = "TITANFLOW_PODS_DIR"

_LAUNCH = re.compile(r"^launch-(\d+)\.json$")


class PodError(RuntimeError):
    """This process is not a pod of a titanflow Kubernetes job (a variable the template sets is missing)."""


def group() -> str:
    """This pod's job uid (:data:`GROUP_ENV`).

    Raises:
        PodError: not set (not in a pod of the trn2-eks work pool's job).
    """
    value = os.environ.get(GROUP_ENV)
    if not value:
        raise PodError(f"{GROUP_ENV} is not set: this is not a pod of a titanflow Kubernetes job (the trn2-eks work "
                       "pool's job template sets it)")
    return value


def index() -> int:
    """This pod's index (:data:`INDEX_ENV`).

    Raises:
        PodError: not set or not a whole number (not in an Indexed Job's pod).
    """
    value = os.environ.get(INDEX_ENV, "")
    if not value.isdigit():
        raise PodError(f"{INDEX_ENV} is {value!r}: this is not a pod of an Indexed Job (Kubernetes sets it in each "
                       "pod of the trn2-eks work pool's job)")
    return int(value)


def group_dir(name: str) -> Path:
    """``<pods dir>/<name>``: the job's launch records."""
    root = Path(os.environ.get(PODS_DIR_ENV) or paths.REPO_ROOT / "runs" / "_pods")
    return root / name


def _write(path: Path, text: str) -> None:
    """``text`` to ``path`` (titanflow.paths.write_atomic), its folder made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.write_atomic(path, text)


def launches(name: str) -> dict[int, dict]:
    """{n: launch record} of job ``name``, every complete record written so far."""
    folder = group_dir(name)
    found = {}
    for path in folder.glob("launch-*.json") if folder.is_dir() else []:
        number = _LAUNCH.match(path.name)
        if number:
            found[int(number[1])] = json.loads(path.read_text())
    return found


def write_launch(name: str, record: dict) -> dict:
    """Write ``record`` as the job's next launch, with its number (``launch``: 1 + the newest so far) and its
    rendezvous id (``rdzv_id``: ``<name>-<number>``, unique per launch); returns what was written."""
    number = max(launches(name), default=0) + 1
    written = {**record, "launch": number, "rdzv_id": f"{name}-{number}"}
    _write(group_dir(name) / f"launch-{number}.json", json.dumps(written) + "\n")
    return written


def cancel(name: str, number: int) -> None:
    """Mark launch ``number`` of job ``name`` cancelled."""
    _write(group_dir(name) / f"cancel-{number}", "")


def cancelled(name: str, number: int) -> bool:
    """Whether launch ``number`` of job ``name`` is cancelled."""
    return (group_dir(name) / f"cancel-{number}").exists()


def finish(name: str, exit_code: int) -> None:
    """Record that the flow of job ``name`` ended with ``exit_code``."""
    _write(group_dir(name) / "finished.json", json.dumps({"exit_code": exit_code}) + "\n")


def finished(name: str) -> int | None:
    """The flow's exit code once it ended, else None."""
    path = group_dir(name) / "finished.json"
    return json.loads(path.read_text())["exit_code"] if path.is_file() else None
