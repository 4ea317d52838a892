"""What this process has buffered for the Prefect server (run log records, events), sent now.

Prefect sends run logs and events from background workers, and what is left when the process exits. titanflow needs
them sent sooner: before a command's temporary server stops (the command's last log lines and states), and before it
reads back what it has just done (a stopped flow run's task runs, which the server records from their events).

- Logs: ``APILogHandler.flush()``, Prefect's documented call ("send any currently enqueued logs and block until
  completion"; it waits at most 5 s).
- Events: Prefect documents no call. ``prefect.events.worker.EventsWorker.drain_all`` is the one its own engine makes
  at the end of a run; this module is the only place titanflow makes it. Checked on Prefect 3.9.0 and 3.9.1, the
  two ends of pyproject.toml's range (tests/unit/prefect_ops/test_drain.py, in both lanes, fails when it moves).
"""

from __future__ import annotations


def send_buffered(timeout_s: float = 10.0) -> None:
    """Send the run log records and the events this process has queued, waiting at most about ``timeout_s`` seconds
    for the events (the logs: Prefect's own 5 s at most)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    EventsWorker.drain_all(timeout=timeout_s)
