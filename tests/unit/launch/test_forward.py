"""titanflow.launch.forward: a launch's lines reach the callback in order, in batches when they come fast, alone
and at once when they come one by one; a stuck callback is skipped after STALL_S, an exception noted once."""

import threading

from titanflow.launch.forward import BATCH_CHARS, BATCH_LINES, QUEUE_LINES, STALL_S, LineForwarder


def test_a_burst_arrives_whole_in_order_in_batches_of_at_most_batch_lines():
    calls: list[list[str]] = []
    gate = threading.Event()

    def on_lines(batch):
        gate.wait()  # the first call holds while the burst queues up behind it
        calls.append(batch)

    forwarder = LineForwarder(on_lines, note=lambda _: None)
    lines = [f"line {i}" for i in range(3 * BATCH_LINES)]
    for line in lines:
        forwarder.put(line)
    gate.set()
    forwarder.close()
    assert [line for batch in calls for line in batch] == lines
    assert max(len(b) for b in calls) == BATCH_LINES and len(calls) <= 5  # 3000 lines in a handful of calls


def test_long_lines_close_a_batch_before_prefects_log_record_limit():
    """4 KiB lines (titanflow.launch.process.LINE_BYTES, the longest the callback gets): a batch closes at
    BATCH_CHARS, well under the 1,000,000 characters of a Prefect log record."""
    calls: list[list[str]] = []
    gate = threading.Event()
    forwarder = LineForwarder(lambda batch: (gate.wait(), calls.append(batch)), note=lambda _: None)
    lines = [f"{i:04d}" + "x" * 4091 for i in range(300)]
    for line in lines:
        forwarder.put(line)
    gate.set()
    forwarder.close()
    assert [line for batch in calls for line in batch] == lines
    assert max(sum(len(line) + 1 for line in batch) for batch in calls) <= BATCH_CHARS + 4096 < 1_000_000


def test_a_line_that_comes_alone_goes_alone_before_the_next_is_put():
    seen: list[list[str]] = []
    arrived = threading.Event()

    def on_lines(batch):
        seen.append(batch)
        arrived.set()

    forwarder = LineForwarder(on_lines, note=lambda _: None)
    for i in range(3):
        arrived.clear()
        forwarder.put(f"step {i}")
        assert arrived.wait(5)  # delivered without waiting for more lines or for the end
    forwarder.close()
    assert seen == [["step 0"], ["step 1"], ["step 2"]]


def test_a_stuck_callback_is_skipped_and_an_exception_noted_once():
    notes: list[str] = []
    release, entered = threading.Event(), threading.Event()

    def stuck(batch):
        entered.set()
        release.wait()

    forwarder = LineForwarder(stuck, note=notes.append)
    forwarder.put("first")
    assert entered.wait(5)  # the first call has its one line and sticks
    for i in range(QUEUE_LINES + 100):  # the queue fills
        forwarder.put(str(i))
    release.set()
    forwarder.close()
    assert forwarder.skipped == 100, forwarder.skipped  # put waited STALL_S, then skipped the 100 with no room
    assert notes == [f"titanflow: 100 output lines skipped the run log while it was {QUEUE_LINES} lines behind; "
                     "this file has every line"]
    assert STALL_S == 2.0

    notes.clear()

    def fails(batch):
        raise ValueError("api down")

    failing = LineForwarder(fails, note=notes.append)
    for i in range(3):
        failing.put(str(i))
    failing.close()
    assert notes == ["titanflow: the output callback failed, the launch goes on: ValueError: api down"]
