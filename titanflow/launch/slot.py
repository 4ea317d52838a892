"""One training at a time per node, with a Prefect global concurrency limit.

Every scenario run holds the slot of its node while ``torchrun`` trains: a nightly
suite, a deployment run started by hand and a CLI run on the same machine queue for
it instead of sharing the cores or the accelerators. The limit is Prefect's own
(visible and adjustable in the UI under Concurrency), named ``titanflow-train-<host>``
with 1 slot; it is created on first use when missing, so no set-up step can be forgotten.
A run on many nodes (a Slurm job) holds the slot of each node's host while it trains
(:func:`node_slots`), so no node ever trains two runs at once, on one host or many.

A held slot is a Prefect lease of :data:`LEASE_S` seconds, renewed every :data:`RENEW_EVERY_S`.
The server keeps leases on disk (``prefect.toml``: filesystem lease storage), so a restart keeps
them; its repossessor frees a slot whose lease expired, so a holder killed outright (SIGKILL,
a lost node) frees it within :data:`LEASE_S`. Who holds the slot is recorded in the Prefect
Variable of the limit (:class:`SlotHolder`): a run waiting for the slot logs that holder and
how long it has waited, every :data:`WAIT_LOG_EVERY_S`, and frees the slot at once when the
holder's flow run has ended (never when it is still live).

Why not ``prefect.concurrency.sync.concurrency``: in Prefect 3.9.1 it stops renewing the lease
after three failed attempts (about 5 s), so a server restarted in the middle of a multi-hour
training drops the slot while the training goes on; and it exposes neither the wait nor the
lease id, so a waiting run could neither say whom it waits for nor free the lease of a holder
that has ended. The acquire, renew and release calls below are Prefect's own client API.
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
#: Seconds a lease lasts unless renewed (the server accepts 60 s to a day): how long a slot whose
#: holder died stays taken before the server frees it.
LEASE_S = 120.0
#: Seconds between renewals: four chances before the lease would expire.
RENEW_EVERY_S = LEASE_S / 4
#: Seconds between two "waiting for the training slot" log lines.
WAIT_LOG_EVERY_S = 30.0
#: Seconds between two acquisition attempts when the server does not say (its Retry-After header).
RETRY_S = 5.0

_HTTP_LOCKED = 423
#: The server's answer to a write that met another request's write in its SQLite database (between this request's
#: read and its write: SQLITE_BUSY_SNAPSHOT, which SQLite's busy timeout does not wait out; Prefect answers it 503).
_HTTP_BUSY = 503
#: Seconds between two tries of a request the server answered :data:`_HTTP_BUSY`, and the number of quick tries before
#: Prefect's own retries take over (:class:`BusyRetries`).
BUSY_RETRY_S = 0.05
BUSY_TRIES = 40
#: What the server answers a renewal of a lease it no longer has (expired and revoked, or lost).
_LEASE_GONE = (404, 410)


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
    """Record ``holder`` as the holder of limit ``name`` (the limit's Prefect Variable, made or overwritten)."""
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    value = holder.model_dump(mode="json")
    try:
        client.create_variable(VariableCreate(name=holder_variable(name), value=value))
    except ObjectAlreadyExists:
        client.update_variable(VariableUpdate(name=holder_variable(name), value=value))


def holder_ended(client, holder: SlotHolder) -> str | None:
    """The final state name of the holder's flow run (``Completed``, ``Crashed``, ...), "gone" when
    the server no longer knows it, or None while it may still train (or is not a flow run)."""
    from prefect.exceptions import ObjectNotFound

    if holder.flow_run_id is None:
        return None
    try:
        state = client.read_flow_run(holder.flow_run_id).state
    except ObjectNotFound:
        return "gone"
    return state.name if state is not None and state.is_final() else None


def _status(err: Exception) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


class BusyRetries(httpx.BaseTransport):
    """An httpx transport that sends a request again through ``inner`` (default: httpx's own) every
    :data:`BUSY_RETRY_S`, at most :data:`BUSY_TRIES` times, while the Prefect server answers :data:`_HTTP_BUSY`; any
    other answer, and the last, go to Prefect's client as they came. The slot's client is Prefect's own, given this
    transport through ``get_client``'s documented ``httpx_settings``.

    Why not Prefect's retries alone: its client waits 2 s before its first retry (2**n s, or the server's
    Retry-After; one setting for every call), and sleeps so even after its last try, while the write conflict behind
    the 503 is over within milliseconds. Measured on a running server (native, cpu, 2 steps, debug log of
    ``prefect.client``): 3 runs of 4 waited 2.1-2.3 s for the slot and one 2.3 s more to give it back, each a single
    503 of the slot's update or the holder record's delete. A transport of its own takes no proxy from the
    environment (httpx mounts those on its default transport only): the Prefect API is reached directly."""

    def __init__(self, inner: httpx.BaseTransport | None = None):
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(BUSY_TRIES):
            response = self.inner.handle_request(request)
            if response.status_code != _HTTP_BUSY:
                return response
            response.close()
            time.sleep(BUSY_RETRY_S)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def _given_or_own(client):
    """``client`` as a context that leaves it open, or a new :func:`slot_client` when it is None."""
    return contextlib.nullcontext(client) if client is not None else slot_client()


def slot_client():
    """Prefect's sync client for the slot's calls: the run's API settings, :class:`BusyRetries` as its transport."""
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True, httpx_settings={"transport": BusyRetries()})


def _lease_holder():
    """Prefect's lease holder for the current flow run (None outside one)."""
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return None, None
    return ConcurrencyLeaseHolder(type="flow_run", id=context.flow_run.id), context.flow_run


def _try_acquire(client, name: str, holder) -> UUID | None:
    """One attempt: the new lease's id, or None when the slot is taken (HTTP 423)."""
    try:
        response = client.increment_concurrency_slots_with_lease([name], SLOTS_PER_NODE, "concurrency", LEASE_S,
                                                             holder=holder)
    except Exception as err:  # noqa: BLE001 - only "locked" is a normal answer; the rest is raised
        if _status(err) == _HTTP_LOCKED:
            return None
        raise
    return UUID(response.json()["lease_id"])


def _free_if_ended(client, name: str, log: logging.Logger) -> bool:
    """Release the lease of the recorded holder when its flow run has ended; True if it did."""
    holder = read_holder(name, client)
    ended = holder_ended(client, holder) if holder else None
    if holder is None or ended is None:
        return False
    _forget(name, holder.lease_id, client)  # first: once the slot is free, the next holder records itself
    client.release_concurrency_slots_with_lease(holder.lease_id)  # a lease already gone: a no-op
    log.warning("training slot %s: its holder %s has ended (%s); its slot is freed", name, holder.describe(), ended)
    return True


def _forget(name: str, lease_id: UUID, client=None) -> None:
    """Remove the holder record of limit ``name`` if it still names ``lease_id`` (call it while the
    slot is still held, so no next holder can have recorded itself in between); ``client``: as :func:`read_holder`."""
    from prefect.exceptions import ObjectNotFound

    with _given_or_own(client) as client:
        held = read_holder(name, client)
        if held is not None and held.lease_id == lease_id:
            with contextlib.suppress(ObjectNotFound):  # one already gone
                client.delete_variable_by_name(holder_variable(name))


def _acquire(client, name: str, holder, log: logging.Logger, on_wait: Callable[[str], None]) -> tuple[UUID, float]:
    """Wait for the slot (module docstring); returns (lease id, seconds waited)."""
    start = time.monotonic()
    next_log = start
    looked_again = False
    while True:
        lease_id = _try_acquire(client, name, holder)
        if lease_id is not None:
            waited = time.monotonic() - start
            if waited >= 1.0:
                log.info("training slot %s acquired after waiting %.0f s", name, waited)
            return lease_id, waited
        if _free_if_ended(client, name, log):
            continue
        now = time.monotonic()
        if now >= next_log:
            held_by = read_holder(name, client)
            if held_by is None and not looked_again:  # a holder forgets its record just before it
                looked_again = True                   # releases: look once more before saying so
                time.sleep(RETRY_S)
                continue
            looked_again = False
            who = (held_by.describe() if held_by
                   else f"a holder that recorded no name (its lease ends within {LEASE_S:.0f} s)")
            message = f"waiting for the training slot {name} (1 slot), held by {who}; waited {now - start:.0f} s"
            log.info(message)
            on_wait(message)
            next_log = now + WAIT_LOG_EVERY_S
        time.sleep(RETRY_S)


class _Renewer:
    """Renews the lease every :data:`RENEW_EVERY_S` until stopped. A failed renewal (server down) is
    logged once per outage and retried on the next beat; a lease the server no longer has (expired
    during a long outage) is re-acquired, and if another run took the slot meanwhile that is logged
    as an error: training goes on, which is the lesser harm for a long run."""

    def __init__(self, slot: HeldSlot, record: Callable[[object, UUID], None], holder, log: logging.Logger):
        self.slot, self.record, self.holder, self.log = slot, record, holder, log
        self.stopping = threading.Event()
        # the caller's context: its Prefect settings (API URL) and run logger reach the thread
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self.run,),
                                       name=f"renew-{slot.name}", daemon=True)

    def run(self) -> None:
        from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

        failing = False
        with slot_client() as client:
            while not self.stopping.wait(RENEW_EVERY_S):
                try:
                    # one try per beat: the next beat is the retry. Prefect's own retries (2 + 4 + ... + 32 s) would
                    # hold a renewal sent during a restart for up to a minute, and the release waits for it
                    with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 0}):
                        client.renew_concurrency_lease(self.slot.lease_id, LEASE_S)
                    if failing:
                        self.log.info("training slot %s: lease renewed again", self.slot.name)
                    failing = False
                except Exception as err:  # noqa: BLE001 - a monitoring failure must not stop training
                    gone = _status(err) in _LEASE_GONE
                    if gone and self.stopping.is_set():
                        return  # a renewal that outlasted the training: its slot is being given back
                    if gone:
                        self._reacquire(client)
                    elif not failing:
                        self.log.warning("training slot %s: lease renewal failed (%s); training goes on, "
                                         "retrying every %.0f s", self.slot.name, err, RENEW_EVERY_S)
                    failing = not gone

    def _reacquire(self, client) -> None:
        lease_id = _try_acquire(client, self.slot.name, self.holder)
        if lease_id is None:
            self.log.error("training slot %s: the lease was lost and another run holds the slot now; this "
                           "training goes on beside it", self.slot.name)
            return
        self.record(client, lease_id)  # first, so whoever sees the new lease id also finds it recorded
        self.slot.lease_id = lease_id
        self.log.warning("training slot %s: the lease was lost (server restart or outage) and re-acquired",
                         self.slot.name)


def _give_back(client, name: str, lease_id: UUID, log: logging.Logger) -> bool:
    """Forget the holder record of ``name`` and release ``lease_id``, asked again every :data:`RETRY_S` while the
    server does not answer (or answers 5xx), for at most :data:`LEASE_S` (after that the lease has expired and the
    server frees the slot itself); True once released, False when refused (4xx) or out of time.

    Why not Prefect's retries alone: they end within about a minute (2 + 4 + ... + 32 s), and a refused connection
    fails some calls at once, so a training that ended while the server restarted left its slot taken until the lease
    expired, and the next run waited for it."""
    deadline = time.monotonic() + LEASE_S
    failed = None
    while True:
        try:
            _forget(name, lease_id)  # a client of its own, as a restarted server needs
            client.release_concurrency_slots_with_lease(lease_id)  # a lease already gone: a no-op
        except Exception as err:  # noqa: BLE001 - a slot left taken is freed by the lease's expiry at worst
            answered = _status(err)
            if answered is not None and answered < 500:  # refused: asking again gets the same answer
                log.warning("training slot %s: release refused (%s); the server frees it when the lease expires",
                            name, err)
                return False
            if failed is None:
                log.warning("training slot %s: release failed (%s); asking again every %g s until the lease "
                            "expires (%.0f s)", name, err, RETRY_S, LEASE_S)
            failed = err
            if time.monotonic() + RETRY_S >= deadline:
                log.warning("training slot %s: not released (%s); the server frees it when the lease expires",
                            name, err)
                return False
            time.sleep(RETRY_S)
            continue
        if failed is not None:
            log.info("training slot %s released once the server answered again", name)
        return True


def _logger() -> logging.Logger:
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


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
    name = limit_name(host)
    log = _logger()
    ensure_limit(name)
    lease_holder, flow_run = _lease_holder()
    since = datetime.datetime.now(datetime.UTC)

    def record(client, lease_id: UUID) -> None:
        _record(client, name, SlotHolder(lease_id=lease_id, flow_run_id=flow_run.id if flow_run else None,
                                         flow_run_name=flow_run.name if flow_run else None, run_id=run_id,
                                         host=socket.gethostname(), since=since))

    with slot_client() as client:
        lease_id, waited = _acquire(client, name, lease_holder, log, on_wait)
        slot = HeldSlot(name=name, lease_id=lease_id, waited_s=round(waited, 3))
        record(client, lease_id)
        renewer = _Renewer(slot, record, lease_holder, log)
        renewer.thread.start()
        try:
            yield slot
        finally:
            renewer.stopping.set()
            # a renewal in flight ends first (one request, or a re-acquisition), so that it cannot take the slot
            # again once it is released; the lease it may have re-acquired is the one released
            renewer.thread.join(timeout=LEASE_S)
            if renewer.thread.is_alive():
                log.warning("training slot %s: the lease renewal has not ended after %.0f s; releasing anyway",
                            name, LEASE_S)
            _give_back(client, name, slot.lease_id, log)


@contextlib.contextmanager
def node_slots(hosts: list[str], run_id: str | None = None,
               on_wait: Callable[[str], None] = lambda _: None) -> Iterator[list[HeldSlot]]:
    """Hold the training slot of every host in ``hosts`` (the nodes a job will run on) for the block, taken one
    after another in sorted order, so two runs whose sets of nodes overlap never each hold a part the other waits
    for; yields them (each :class:`HeldSlot` with its own wait). A Slurm job holds its nodes' slots this way
    (titanflow.launch.slurm.job), so it never trains on a node where another run trains, Slurm's or not.

    Raises:
        httpx.HTTPStatusError: as :func:`training_slot`.
    """
    with contextlib.ExitStack() as held:
        yield [held.enter_context(training_slot(host, run_id, on_wait)) for host in sorted(set(hosts))]


def release_stale_slots(api_url: str) -> list[str]:
    """At a server's start: free every ``titanflow-train-*`` slot held by a flow run that has ended;
    returns the limits freed. Slots of live runs are left alone (their leases survive a restart
    and are renewed), and so are slots without a recorded holder (their leases expire)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    freed = []
    log = logging.getLogger(__name__)
    with temporary_settings({PREFECT_API_URL: api_url}), slot_client() as client:
        for limit in client.read_global_concurrency_limits(limit=200):
            if limit.name.startswith(PREFIX) and limit.active_slots and _free_if_ended(client, limit.name, log):
                freed.append(limit.name)
    return freed
