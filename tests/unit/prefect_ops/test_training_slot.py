"""The node's training slot against a real local Prefect server (the session's ``prefect_api``): created on
first use, held under a renewed lease with its holder recorded, a wait that says whom it waits for and is
measured, a slot whose holder has ended freed, a live holder's never, a lost lease re-acquired."""

import contextvars
import threading
import time
import uuid

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from titanflow.prefect_ops import slot as slots
from titanflow.prefect_ops import busy_client, slot_holder
from titanflow.prefect_ops.slot import SLOTS_PER_NODE, limit_name, read_holder, training_slot
from titanflow.prefect_ops.slot_holder import release_stale_slots


@pytest.fixture()
def api(prefect_api):
    from prefect.client.orchestration import get_client

    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as client:
        yield client


@pytest.fixture()
def fast(monkeypatch):
    """Retry, log and renew every fraction of a second instead of every few seconds."""
    monkeypatch.setattr(slots, "RETRY_S", 0.2)
    monkeypatch.setattr(slots, "WAIT_LOG_EVERY_S", 0.5)
    monkeypatch.setattr(slots, "RENEW_EVERY_S", 0.5)


def _active(client, name: str) -> int:
    return client.read_global_concurrency_limit_by_name(name).active_slots


def _ended_flow_run_id(prefect_api) -> uuid.UUID:
    from prefect import flow

    @flow
    def finished():
        return 1

    with temporary_settings({PREFECT_API_URL: prefect_api}):
        return finished(return_state=True).state_details.flow_run_id


def _stale_lease(client, name: str, flow_run_id: uuid.UUID) -> uuid.UUID:
    """A lease of ``name`` recorded as held by ``flow_run_id``, as a holder killed mid-training leaves it."""
    from prefect.variables import Variable

    slots.ensure_limit(name)
    lease_id = slots._try_acquire(client, name, None)
    Variable.set(slot_holder.holder_variable(name), slots.SlotHolder(
        lease_id=lease_id, flow_run_id=flow_run_id, flow_run_name="gone-run", run_id="killed", host="node",
        since="2026-12-01T00:00:00Z").model_dump(mode="json"), overwrite=True)
    return lease_id


def test_slot_is_created_held_recorded_and_released(api):
    with training_slot("test-node-a", run_id="r1") as held:
        assert held.name == limit_name("test-node-a") == "titanflow-train-test-node-a"
        limit = api.read_global_concurrency_limit_by_name(held.name)
        assert (limit.limit, limit.active_slots) == (SLOTS_PER_NODE, 1)
        holder = read_holder(held.name)
        assert (holder.run_id, holder.lease_id) == ("r1", held.lease_id) and held.waited_s < 5
    assert _active(api, held.name) == 0 and read_holder(held.name) is None


def test_a_waiting_run_names_the_holder_and_its_wait_is_measured(api, fast):
    acquired, waiting = threading.Event(), threading.Event()
    messages: list[str] = []

    def holder():
        with training_slot("test-node-w", run_id="first"):
            acquired.set()
            waiting.wait(60)  # until the second run says it waits, then a second more
            time.sleep(1.0)

    first = threading.Thread(target=contextvars.copy_context().run, args=(holder,))  # the same Prefect API
    first.start()
    acquired.wait(60)
    start = time.monotonic()
    with training_slot("test-node-w", run_id="second", on_wait=lambda m: (messages.append(m), waiting.set())) as held:
        assert read_holder(held.name).run_id == "second"
    first.join()
    assert 1.0 <= held.waited_s <= time.monotonic() - start
    assert messages and all("waiting for the training slot titanflow-train-test-node-w (1 slot), held by run first"
                            in m for m in messages)


def test_the_slots_of_a_jobs_nodes_are_held_together_and_an_overlapping_set_waits_for_them(api, fast):
    """node_slots: every host's slot held for the block (a host named twice once); a run whose nodes overlap (b)
    waits for the whole first set to end, and gets all of its own (b, c) after."""
    acquired, messages = threading.Event(), []

    def first_job():
        with slots.node_slots(["test-node-b", "test-node-a", "test-node-b"], run_id="first") as held:
            assert [h.name for h in held] == [limit_name("test-node-a"), limit_name("test-node-b")]
            assert _active(api, limit_name("test-node-a")) == _active(api, limit_name("test-node-b")) == 1
            acquired.set()
            time.sleep(1.5)

    first = threading.Thread(target=contextvars.copy_context().run, args=(first_job,))
    first.start()
    acquired.wait(60)
    with slots.node_slots(["test-node-c", "test-node-b"], run_id="second", on_wait=messages.append) as held:
        assert [h.name for h in held] == [limit_name("test-node-b"), limit_name("test-node-c")]
        assert held[0].waited_s >= 1.0 and held[1].waited_s < 5
    first.join()
    assert any("titanflow-train-test-node-b (1 slot), held by run first" in m for m in messages)
    assert all(_active(api, limit_name(h)) == 0 for h in ("test-node-a", "test-node-b", "test-node-c"))


@pytest.mark.fault
def test_slot_of_a_flow_run_that_ended_is_freed_at_once(api, prefect_api, fast):
    name = limit_name("test-node-e")
    _stale_lease(api, name, _ended_flow_run_id(prefect_api))
    assert _active(api, name) == 1
    with training_slot("test-node-e", run_id="next") as held:
        assert held.waited_s < 5 and _active(api, name) == 1
    assert _active(api, name) == 0


@pytest.mark.fault
def test_slot_of_a_live_flow_run_is_never_freed(api, prefect_api):
    from prefect import flow

    @flow
    def not_started():
        pass

    name = limit_name("test-node-l")
    live = api.create_flow_run(not_started)  # Scheduled: not final, so its holder may still train
    lease_id = _stale_lease(api, name, live.id)
    assert slots._free_if_ended(api, name, slots.logging.getLogger("test")) is False
    assert release_stale_slots(prefect_api) == [] and _active(api, name) == 1
    api.release_concurrency_slots_with_lease(lease_id)


@pytest.mark.fault
def test_server_start_frees_only_slots_whose_holder_ended(api, prefect_api):
    name = limit_name("test-node-s")
    _stale_lease(api, name, _ended_flow_run_id(prefect_api))
    assert name in release_stale_slots(prefect_api)
    assert _active(api, name) == 0 and read_holder(name) is None
    assert release_stale_slots(prefect_api) == []  # nothing left to free


@pytest.mark.fault
def test_a_lease_lost_while_training_is_re_acquired(api, fast):
    with training_slot("test-node-r", run_id="long") as held:
        first = held.lease_id
        api.release_concurrency_slots_with_lease(first)  # as an expired lease the server revoked
        deadline = time.monotonic() + 10
        while held.lease_id == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert held.lease_id != first and _active(api, held.name) == 1
        assert read_holder(held.name).lease_id == held.lease_id
    assert _active(api, held.name) == 0


def test_a_request_the_server_answers_busy_is_sent_again_at_once_and_any_other_answer_goes_through(monkeypatch):
    """A 503 (the server's SQLite write conflict) is sent again after BUSY_RETRY_S by the slot's transport, below
    Prefect's own client, which would sleep 2 s first (and after its last try too); 423 (slot taken) goes to the
    caller at once; a server busy for all BUSY_TRIES leaves the 503 to Prefect's retries. The client is Prefect's
    own, on an httpx mock server; every sleep is recorded, none slept."""
    import httpx
    from prefect.client.base import PrefectHttpxSyncClient
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    answers, planned = [], []

    def server(request):
        answers.append(planned.pop(0) if planned else 200)
        return httpx.Response(answers[-1], json={"lease_id": "x"}, request=request)

    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the time module Prefect's client and slot.py both sleep with
    client = PrefectHttpxSyncClient(transport=busy_client.BusyRetries(httpx.MockTransport(server)), base_url="http://server/api")
    with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 0}):
        planned[:] = [503, 503]
        assert client.post("/v2/concurrency_limits/increment-with-lease").status_code == 200
        assert answers == [503, 503, 200] and slept == [busy_client.BUSY_RETRY_S] * 2
        answers.clear(), slept.clear()
        planned[:] = [423]
        with pytest.raises(httpx.HTTPStatusError, match="423"):
            client.post("/v2/concurrency_limits/increment-with-lease")
        assert answers == [423] and slept == []
        answers.clear()
        planned[:] = [503] * (busy_client.BUSY_TRIES + 1)
        with pytest.raises(httpx.HTTPStatusError, match="503"):  # Prefect's own retries (off here) take it from there
            client.post("/v2/concurrency_limits/increment-with-lease")
        tries = busy_client.BUSY_TRIES
        assert len(answers) == tries + 1 and slept[:tries] == [busy_client.BUSY_RETRY_S] * tries


@pytest.mark.fault
def test_a_slot_whose_release_meets_a_restarting_server_is_released_once_it_answers(api, fast, caplog, monkeypatch):
    """The end of a training that met a server restart: the holder record's calls open a new client each time, which
    fails at once on a refused connection (Prefect retries a refused connection only on a client that has connected
    before). The release is asked again until the server answers, not left to the lease's expiry (LEASE_S)."""
    import httpx

    caplog.set_level("INFO", logger=slots.__name__)
    forget = slots._forget
    refused = []

    def restarting(name, lease_id):
        if len(refused) < 2:
            refused.append(name)
            raise httpx.ConnectError("connection refused")
        forget(name, lease_id)

    with training_slot("test-node-x", run_id="restart") as held:
        assert _active(api, held.name) == 1
        monkeypatch.setattr(slots, "_forget", restarting)  # the server goes down as the training ends
    assert refused == [held.name] * 2
    assert _active(api, held.name) == 0 and read_holder(held.name) is None
    assert "release failed" in caplog.text and "released once the server answered again" in caplog.text


@pytest.mark.fault
def test_a_renewal_still_in_flight_when_training_ends_never_takes_the_slot_again(api, fast, caplog, monkeypatch):
    """A renewal that a restarting server answers late ("lease gone") after the training has ended: the release
    waits for it and it gives up instead of re-acquiring, so the slot is free once the block is left (before, the
    release went ahead after 10 s and the late answer took the slot again until the lease expired: the next run
    then waited up to LEASE_S)."""
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    caplog.set_level("INFO", logger=slots.__name__)
    ending, in_flight = threading.Event(), threading.Event()

    retries = []

    class Restarting(busy_client.BusyRetries):  # the slot's own transport: no Prefect code replaced
        def handle_request(self, request):
            if not request.url.path.endswith("/renew"):
                return super().handle_request(request)
            retries.append(PREFECT_CLIENT_MAX_RETRIES.value())
            if not ending.is_set():
                return super().handle_request(request)
            in_flight.set()
            time.sleep(1.0)  # the server restarting while the training ends, and losing the lease
            api.release_concurrency_slots_with_lease(uuid.UUID(request.url.path.split("/")[-2]))
            return httpx.Response(404, request=request)

    monkeypatch.setattr(slots, "slot_client", lambda: get_client(sync_client=True,
                                                                 httpx_settings={"transport": Restarting()}))
    with training_slot("test-node-late", run_id="late") as held:
        ending.set()
        assert in_flight.wait(10)  # the training ends while the renewal waits for its answer
    assert _active(api, held.name) == 0 and read_holder(held.name) is None
    assert "lease was lost" not in caplog.text  # no new lease asked for
    # one request per beat: Prefect's own retries (up to a minute) would hold the release that waits for it
    assert retries and set(retries) == {0}


def test_prefect_public_concurrency_still_cannot_hold_the_slot(api):
    """What titanflow/prefect_ops/slot.py says of Prefect's public ``prefect.concurrency.sync.concurrency``, checked on
    Prefect 3.9.0 and 3.9.1: it takes no client, transport or renewal policy and yields no lease id. Fails when either
    moves: then the slot may be able to hold its lease through it."""
    import inspect

    from prefect.concurrency.sync import concurrency

    assert list(inspect.signature(concurrency).parameters) == [
        "names", "occupy", "timeout_seconds", "max_retries", "lease_duration", "strict", "holder",
        "raise_on_lease_renewal_failure"]
    name = limit_name("test-node-p")
    slots.ensure_limit(name)
    with concurrency(name, lease_duration=60, raise_on_lease_renewal_failure=False) as held:
        assert held is None and _active(api, name) == 1
    assert _active(api, name) == 0
