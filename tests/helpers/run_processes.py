"""Finding a run's live processes, its logged steps and how often it trained, for tests that stop, kill or
cancel real runs."""

from pathlib import Path

import psutil


def run_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes whose command line (torchrun: ``--log-dir <run>/train/ranks``) or environment
    (the ranks: ``TITANFLOW_JOB=<run>/job/job.json``) names ``run_dir``; a stopped one counts."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            named = " ".join(proc.cmdline()) + " " + " ".join(proc.environ().values())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if str(run_dir) in named:
            found.append(proc)
    return found


def rank_process(run_dir: Path, rank: int) -> psutil.Process | None:
    """The live rank ``rank`` of the run's launch, or None: a rank torchrun started afresh has ``RANK`` in its
    environment; a forked rank (the cpu target, titan_cfg.forked_rank) shows its launcher's, and is named."""
    from titan_cfg.forked_rank import process_name

    for proc in run_processes(run_dir):
        try:
            if proc.environ().get("RANK") == str(rank) or proc.name() == process_name(str(rank)).decode():
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def logged_steps(train_log: Path) -> list[dict]:
    """The step lines of rank 0's train.log so far (titanflow.launch.metrics, as the train task parses them)."""
    from titanflow.launch.metrics import parse_step_line

    if not train_log.is_file():
        return []
    return [row for row in map(parse_step_line, train_log.read_text(errors="replace").splitlines()) if row]


def train_run_count(flow_run_id, wait_s: float = 30) -> int:
    """How many times the flow run's train task ran, from the Prefect API (1 = no retry). A task run reaches the
    server as events, sent and recorded after the flow has returned: the client's are sent first, then the API is
    asked until the train task run's last state is there (at most ``wait_s`` seconds)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from titanflow.prefect_ops.drain import send_buffered

    send_buffered()
    found: list = []

    def recorded() -> bool:
        with get_client(sync_client=True) as client:
            task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        found[:] = [t for t in task_runs if t.name.startswith("train-") and t.state is not None and t.state.is_final()]
        return bool(found)

    wait_until(recorded, wait_s, "the train task run's final state on the Prefect server")
    (train,) = found
    return train.run_count


def changed_history_cells(before, after) -> dict:
    """{(run_id, column): (before, after)} for every cell of ``before``'s rows that differs in ``after``
    (both history tables as titanflow.record.history.read_history returns them); {} when untouched."""
    import json

    def records(table):
        return {row["run_id"]: row for row in json.loads(table.to_json(orient="records", date_format="iso"))}

    old, new = records(before), records(after[after.run_id.isin(before.run_id)])
    return {(run_id, column): (row.get(column), new.get(run_id, {}).get(column))
            for run_id, row in old.items() for column in set(row) | set(new.get(run_id, {}))
            if row.get(column) != new.get(run_id, {}).get(column)}


def wait_until(condition, seconds: float, what: str) -> None:
    """Poll ``condition()`` every 0.2 s until it is true.

    Raises:
        TimeoutError: not true within ``seconds`` (the message names ``what``).
    """
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.2)
