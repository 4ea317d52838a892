"""One training at a time per node: the slot of a Prefect global concurrency limit, ``titanflow-train-<host>``.

The limit (1 slot, visible and adjustable in the UI) is created on first use. A held slot is a Prefect lease of
:data:`LEASE_S`, renewed every :data:`RENEW_EVERY_S`; the server keeps leases on disk (prefect.toml), so a restart
keeps them, and frees the slot of a holder killed outright once its lease expires. The holder is recorded in a
Prefect Variable (:class:`SlotHolder`): a waiting run logs it every :data:`WAIT_LOG_EVERY_S` and frees its slot at
once when its flow run has ended. Every call is Prefect's public client API (``get_client``, the lease calls, Variables).

Why not Prefect's public ``prefect.concurrency.sync.concurrency`` (checked on Prefect 3.9.0 and 3.9.1): it yields no
lease id (so no record could name the lease of a holder that has ended), its renewal gives up after three failed
tries, about 3 s, and leaves the slot lost while the training goes on (a server restart takes longer), its first
renewal uses Prefect's client retries (a renewal during a restart would then hold the release for up to a minute),
its release raises out of the block when the server does not answer, and its client takes no transport (a busy 503
costs 2 s). tests/unit/launch/test_training_slot.py, in both lanes, fails when its signature or its yield changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import re
import socket
import threading
import time
from typing import Callable, Iterator
from uuid import UUID

import httpx
from pydantic import BaseModel, Field

#: Slots per node: trainings that may run at once on one machine.
SLOTS_PER_NODE = 1
#: Name prefix of the per-node limits.
PREFIX = "titanflow-train-"
#: Seconds a lease lasts unless renewed (the server accepts 60 s to a day): how long the slot of a holder that died
#: stays taken.
LEASE_S = 120.0
#: Seconds between renewals: four chances before the lease would expire.
RENEW_EVERY_S = LEASE_S / 4
#: Seconds between two "waiting for the training slot" log lines.
WAIT_LOG_EVERY_S = 30.0
#: Seconds between two acquisition attempts, and between two tries of a release the server does not answer.
RETRY_S = 5.0
#: Seconds between two tries of a request the server answered 503 (a write that met another in its SQLite database:
#: SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out), and the quick tries before Prefect's retries take over.
BUSY_RETRY_S = 0.05
BUSY_TRIES = 40


class SlotHolder(BaseModel):
    """Who holds a training slot, as recorded in the limit's Prefect Variable."""

    lease_id: UUID = Field(description="the Prefect concurrency lease")
    flow_run_id: UUID | None = Field(description="the holding flow run (None outside a flow run)")
    flow_run_name: str | None = Field(description="its Prefect name")
    run_id: str | None = Field(description="the titanflow run folder's name")
    host: str = Field(description="the machine the holder runs on")
    since: datetime.datetime = Field(description="UTC, when the slot was acquired")

    def describe(self) -> str:
        """``run <run_id> (flow run <name> <id>) on <host> since <time>``."""
        return (f"run {self.run_id} (flow run {self.flow_run_name} {self.flow_run_id}) on {self.host} "
                f"since {self.since:%H:%M:%S} UTC")


class HeldSlot(BaseModel):
    """A slot this process holds: the limit, the lease, and the seconds waited for it."""

    name: str = Field(description="the global concurrency limit")
    lease_id: UUID = Field(description="the current lease (a re-acquired slot has a new one)")
    waited_s: float = Field(description="seconds between asking for the slot and getting it")


def limit_name(host: str | None = None) -> str:
    """``titanflow-train-<host>``: the concurrency limit of this machine (``socket.gethostname()``)."""
    return PREFIX + (host or socket.gethostname())


def holder_variable(name: str) -> str:
    """The Prefect Variable naming the holder of limit ``name`` (letters, digits, ``-`` and ``_`` only)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name).lower()


class BusyRetries(httpx.BaseTransport):
    """An httpx transport that sends a request again through ``inner`` (default: httpx's own) every
    :data:`BUSY_RETRY_S`, at most :data:`BUSY_TRIES` times, while the server answers 503; any other answer, and the
    last, go to Prefect's client as they came. Prefect's client would sleep 2 s first (its one backoff setting for
    every call), while the write conflict is over within milliseconds: measured, 3 runs of 4 on a running server
    waited 2.1-2.3 s for the slot. Its own transport takes no proxy from the environment (httpx mounts those on its
    default transport only): the Prefect API is reached directly."""

    def __init__(self, inner: httpx.BaseTransport | None = None):
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(BUSY_TRIES):
            response = self.inner.handle_request(request)
            if response.status_code != 503:
                return response
            response.close()
            time.sleep(BUSY_RETRY_S)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def slot_client():
    """Prefect's sync client for the slot's calls: the run's API settings, :class:`BusyRetries` as its transport
    (``get_client``'s documented ``httpx_settings``)."""
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True, httpx_settings={"transport": BusyRetries()})


def _given_or_own(client):
    return contextlib.nullcontext(client) if client is not None else slot_client()


def _status(err: Exception) -> int | None:
    return getattr(getattr(err, "response", None), "status_code", None)


def ensure_limit(name: str, slots: int = SLOTS_PER_NODE) -> None:
    """Create the global concurrency limit ``name`` with ``slots`` if the Prefect API has none by that name."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with slot_client() as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another run created it meanwhile
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


def read_holder(name: str, client=None) -> SlotHolder | None:
    """The recorded holder of limit ``name``, or None when none is recorded (``client``: a Prefect sync client,
    default :func:`slot_client`)."""
    with _given_or_own(client) as client:
        variable = client.read_variable_by_name(holder_variable(name))
    return SlotHolder.model_validate(variable.value) if variable is not None and variable.value else None


def _record(client, name: str, holder: SlotHolder) -> None:
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    value = holder.model_dump(mode="json")
    try:
        client.create_variable(VariableCreate(name=holder_variable(name), value=value))
    except ObjectAlreadyExists:
        client.update_variable(VariableUpdate(name=holder_variable(name), value=value))


def _forget(name: str, lease_id: UUID, client=None) -> None:
    """Remove the holder record of ``name`` if it still names ``lease_id``: while the slot is held, so no next holder
    can have recorded itself in between."""
    from prefect.exceptions import ObjectNotFound

    with _given_or_own(client) as client:
        held = read_holder(name, client)
        if held is not None and held.lease_id == lease_id:
            with contextlib.suppress(ObjectNotFound):  # one already gone
                client.delete_variable_by_name(holder_variable(name))


def holder_ended(client, holder: SlotHolder) -> str | None:
    """The final state name of the holder's flow run (``Completed``, ``Crashed``, ...), "gone" when the server no
    longer knows it, or None while it may still train (or is not a flow run)."""
    from prefect.exceptions import ObjectNotFound

    if holder.flow_run_id is None:
        return None
    try:
        state = client.read_flow_run(holder.flow_run_id).state
    except ObjectNotFound:
        return "gone"
    return state.name if state is not None and state.is_final() else None


def _try_acquire(client, name: str, holder) -> UUID | None:
    """One attempt: the new lease's id, or None when the slot is taken (HTTP 423)."""
    try:
        response = client.increment_concurrency_slots_with_lease([name], SLOTS_PER_NODE, "concurrency", LEASE_S,
                                                             holder=holder)
    except httpx.HTTPStatusError as err:
        if err.response.status_code == 423:
            return None
        raise
    return UUID(response.json()["lease_id"])


def _free_if_ended(client, name: str, log: logging.Logger) -> bool:
    """Release the lease of the recorded holder when its flow run has ended; True if it did."""
    holder = read_holder(name, client)
    ended = holder_ended(client, holder) if holder else None
    if ended is None:
        return False
    _forget(name, holder.lease_id, client)  # first: once the slot is free, the next holder records itself
    client.release_concurrency_slots_with_lease(holder.lease_id)  # a lease already gone: a no-op
    log.warning("training slot %s: its holder %s has ended (%s); its slot is freed", name, holder.describe(), ended)
    return True


def _acquire(client, name: str, holder, log: logging.Logger, on_wait: Callable[[str], None]) -> tuple[UUID, float]:
    start = next_log = time.monotonic()
    unnamed = False  # the last look found no record: a holder forgets it just before it releases, so look twice
    while (lease_id := _try_acquire(client, name, holder)) is None:
        if _free_if_ended(client, name, log):
            continue
        held_by, now = read_holder(name, client), time.monotonic()
        if now >= next_log and (held_by or unnamed):
            who = held_by.describe() if held_by else f"a holder that recorded no name (its lease ends within {LEASE_S:.0f} s)"
            message = f"waiting for the training slot {name} (1 slot), held by {who}; waited {now - start:.0f} s"
            log.info(message)
            on_wait(message)
            next_log = now + WAIT_LOG_EVERY_S
        unnamed = held_by is None
        time.sleep(RETRY_S)
    if (waited := time.monotonic() - start) >= 1.0:
        log.info("training slot %s acquired after waiting %.0f s", name, waited)
    return lease_id, waited


def _renew(slot: HeldSlot, record: Callable[[object, UUID], None], holder, log: logging.Logger,
           stopping: threading.Event) -> None:
    """Renew the lease every :data:`RENEW_EVERY_S` until ``stopping``. A failed renewal (server down) is logged once
    per outage and retried on the next beat; a lease the server no longer has is re-acquired (another run holding the
    slot meanwhile is logged as an error: training goes on, the lesser harm for a long run)."""
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    failing = False
    with slot_client() as client:
        while not stopping.wait(RENEW_EVERY_S):
            try:
                # one try per beat: the next beat is the retry, and the release never waits for Prefect's retries
                with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 0}):
                    client.renew_concurrency_lease(slot.lease_id, LEASE_S)
                if failing:
                    log.info("training slot %s: lease renewed again", slot.name)
                failing = False
            except Exception as err:  # noqa: BLE001 - a monitoring failure must not stop training
                if _status(err) not in (404, 410):
                    if not failing:
                        log.warning("training slot %s: lease renewal failed (%s); training goes on, retrying every "
                                    "%.0f s", slot.name, err, RENEW_EVERY_S)
                    failing = True
                elif stopping.is_set():
                    return  # a renewal that outlasted the training: its slot is being given back
                elif (lease_id := _try_acquire(client, slot.name, holder)) is None:
                    log.error("training slot %s: the lease was lost and another run holds the slot now; this "
                              "training goes on beside it", slot.name)
                else:
                    record(client, lease_id)  # first, so whoever sees the new lease id also finds it recorded
                    slot.lease_id, failing = lease_id, False
                    log.warning("training slot %s: the lease was lost (server restart or outage) and re-acquired",
                                slot.name)


def _give_back(client, name: str, lease_id: UUID, log: logging.Logger) -> None:
    """Forget the record and release the lease, asked again every :data:`RETRY_S` while the server does not answer
    (Prefect's retries end within a minute, and a new client fails at once on a refused connection), until the lease
    would have expired."""
    deadline, failed = time.monotonic() + LEASE_S, None
    while True:
        try:
            _forget(name, lease_id)  # a client of its own, as a restarted server needs
            client.release_concurrency_slots_with_lease(lease_id)  # a lease already gone: a no-op
        except Exception as err:  # noqa: BLE001 - a slot left taken is freed by the lease's expiry at worst
            if (_status(err) or 500) < 500 or time.monotonic() + RETRY_S >= deadline:  # refused, or out of time
                log.warning("training slot %s: not released (%s); the server frees it when the lease expires",
                            name, err)
                return
            if failed is None:
                log.warning("training slot %s: release failed (%s); asking again every %g s until the lease "
                            "expires (%.0f s)", name, err, RETRY_S, LEASE_S)
            failed = err
            time.sleep(RETRY_S)
            continue
        if failed is not None:
            log.info("training slot %s released once the server answered again", name)
        return


@contextlib.contextmanager
def training_slot(host: str | None = None, run_id: str | None = None,
                  on_wait: Callable[[str], None] = lambda _: None) -> Iterator[HeldSlot]:
    """Hold this node's training slot for the block, waiting while another run holds it; yields the
    :class:`HeldSlot` (its ``waited_s`` is the wait, never part of any task's time).

    ``run_id`` names the holder in the record; ``on_wait`` gets each "waiting for the training slot"
    message (e.g. to update the progress artifact).

    Raises:
        httpx.HTTPStatusError: the API refused the request for another reason than a taken slot.
    """
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder
    from prefect.context import FlowRunContext
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        log = get_run_logger()
    except MissingContextError:
        log = logging.getLogger(__name__)
    name = limit_name(host)
    ensure_limit(name)
    flow_run = getattr(FlowRunContext.get(), "flow_run", None)
    lease_holder = ConcurrencyLeaseHolder(type="flow_run", id=flow_run.id) if flow_run else None
    since = datetime.datetime.now(datetime.UTC)

    def record(client, lease_id: UUID) -> None:
        _record(client, name, SlotHolder(lease_id=lease_id, flow_run_id=getattr(flow_run, "id", None),
                                         flow_run_name=getattr(flow_run, "name", None), run_id=run_id,
                                         host=socket.gethostname(), since=since))

    with slot_client() as client:
        lease_id, waited = _acquire(client, name, lease_holder, log, on_wait)
        slot = HeldSlot(name=name, lease_id=lease_id, waited_s=round(waited, 3))
        record(client, lease_id)
        stopping = threading.Event()
        # the caller's context: its Prefect settings (API URL) and run logger reach the thread
        renewer = threading.Thread(target=contextvars.copy_context().run, daemon=True, name=f"renew-{name}",
                                   args=(_renew, slot, record, lease_holder, log, stopping))
        renewer.start()
        try:
            yield slot
        finally:
            stopping.set()
            # a renewal in flight ends first, so that it cannot take the slot again once it is released
            renewer.join(timeout=LEASE_S)
            if renewer.is_alive():
                log.warning("training slot %s: the lease renewal has not ended after %.0f s; releasing anyway",
                            name, LEASE_S)
            _give_back(client, name, slot.lease_id, log)


@contextlib.contextmanager
def node_slots(hosts: list[str], run_id: str | None = None,
               on_wait: Callable[[str], None] = lambda _: None) -> Iterator[list[HeldSlot]]:
    """Hold the training slot of every host in ``hosts`` (a Slurm job's nodes, titanflow.launch.slurm.job) for the
    block, taken one after another in sorted order, so two runs whose sets of nodes overlap never each hold a part
    the other waits for; yields them (each :class:`HeldSlot` with its own wait).

    Raises:
        httpx.HTTPStatusError: as :func:`training_slot`.
    """
    with contextlib.ExitStack() as held:
        yield [held.enter_context(training_slot(host, run_id, on_wait)) for host in sorted(set(hosts))]


def release_stale_slots(api_url: str) -> list[str]:
    """At a server's start: free every ``titanflow-train-*`` slot held by a flow run that has ended; returns the
    limits freed. Slots of live runs are left alone (their leases survive a restart and are renewed), and so are
    slots without a recorded holder (their leases expire)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    log = logging.getLogger(__name__)
    with temporary_settings({PREFECT_API_URL: api_url}), slot_client() as client:
        return [limit.name for limit in client.read_global_concurrency_limits(limit=200)
                if limit.name.startswith(PREFIX) and limit.active_slots and _free_if_ended(client, limit.name, log)]
