"""A launch's output lines to a callback (the Prefect run log, the progress artifact), in batches, on a thread of
its own, so that nothing the callback does holds up the reading of the output.

- Batches: the thread takes every line waiting in the queue (at most :data:`BATCH_LINES`, :data:`BATCH_CHARS`)
  and hands them to the callback in one call, in order; a line that arrives alone goes alone, at once. One Prefect log record per
  batch instead of one per line: ranks that print fast cost the flow process one logging call per batch.
- A slow callback: the queue holds at most :data:`QUEUE_LINES` lines. A full queue holds the producer back while
  the callback keeps taking lines (it gets every line); once one call has lasted :data:`STALL_S` (a Prefect API
  call retrying while the server is down), the lines with no room skip it instead and :meth:`LineForwarder.close`
  says how many, so the producer never waits on a stuck callback.
- An exception of the callback is noted once and the lines go on.
- At the end the callback gets :data:`DRAIN_S` to catch up; one still blocked then is abandoned.

Why not the logging module's QueueHandler: it forwards records one by one and has no bound, no stall rule and no
way to say what was skipped; the lines here are not log records yet.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable

#: Lines the callback may be behind before the producer waits (then skips a stuck callback).
QUEUE_LINES = 10_000
#: Seconds one call of the callback may last before lines with no room in the queue skip it.
STALL_S = 2.0
#: Seconds the callback gets at the end to take what is queued.
DRAIN_S = 5.0
#: Most lines in one call of the callback.
BATCH_LINES = 1000
#: Most characters in one call of the callback (with the newlines joining them): a batch is one Prefect log
#: record, and Prefect drops a record larger than PREFECT_LOGGING_TO_API_MAX_LOG_SIZE (1,000,000 by default).
BATCH_CHARS = 256 * 1024


class LineForwarder:
    """Lines put by any thread reach ``on_lines(batch)`` on the forwarder's thread (module docstring); ``note(text)``
    is where the forwarder's own notes go (a skipped count, a callback error, one abandoned), e.g. the log file."""

    _END = object()

    def __init__(self, on_lines: Callable[[list[str]], None], note: Callable[[str], None]):
        self._on_lines, self._note = on_lines, note
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_LINES)
        self._closed = False
        self.skipped = 0  # lines the callback had no room for
        self.error: str | None = None  # the callback's first exception, if any
        self._call_started: float | None = None  # when the current call began (None: between calls)
        self._lock = threading.Lock()
        # the callback runs in the caller's context: Prefect's settings (the run's own API) and its run context go with
        # it, so a log record sent from this thread goes to the run's server, not to one Prefect would start for a
        # thread that knows no API URL
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._forward,), daemon=True)
        self._thread.start()

    def put(self, text: str) -> None:
        """Queue ``text`` for the callback: wait while the queue is full and the callback takes lines; skip it once
        a call is stuck (longer than :data:`STALL_S`) or the forwarder is closed."""
        if self._closed:
            return
        while True:
            try:
                self._queue.put_nowait(text)
                return
            except queue.Full:
                started = self._call_started
                if self._closed or started is not None and time.monotonic() - started > STALL_S:
                    break
                time.sleep(0.01)
        with self._lock:
            self.skipped += 1

    def _forward(self) -> None:
        done = False
        while not done:
            batch, chars = [], 0
            item = self._queue.get()
            while item is not self._END:
                batch.append(item)
                chars += len(item) + 1
                if len(batch) >= BATCH_LINES or chars >= BATCH_CHARS:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            done = item is self._END
            if batch and not self._closed:
                self._call(batch)

    def _call(self, batch: list[str]) -> None:
        self._call_started = time.monotonic()
        try:
            self._on_lines(batch)
        except Exception as err:  # noqa: BLE001 - the callback (a log, an artifact) must not stop the lines
            if self.error is None:
                self.error = f"{type(err).__name__}: {err}"
                self._note(f"titanflow: the output callback failed, the launch goes on: {self.error}")
        finally:
            self._call_started = None

    def close(self) -> None:
        """Let the callback take what is queued (up to :data:`DRAIN_S`), note skipped lines and an abandoned
        callback, then take no more lines."""
        deadline = time.monotonic() + DRAIN_S
        try:  # the producers are done (or abandoned): only the forwarder takes from the queue now
            self._queue.put(self._END, timeout=DRAIN_S)
            self._thread.join(max(0.0, deadline - time.monotonic()))
        except queue.Full:
            pass
        if self._thread.is_alive():
            self._note(f"titanflow: the output callback was still busy {DRAIN_S:.0f} s after the launch ended and "
                       "gets no more lines; this file has every line")
        self._closed = True
        if self.skipped:
            self._note(f"titanflow: {self.skipped} output lines skipped the run log while it was {QUEUE_LINES} "
                       "lines behind; this file has every line")
