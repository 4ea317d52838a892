"""One training at a time per node: the slot of a Prefect global concurrency limit, ``titanflow-train-<host>``.

The limit (1 slot, adjustable in the UI) is made on first use; a held slot is a Prefect lease of :data:`LEASE_S`,
renewed every :data:`RENEW_EVERY_S`, kept on disk by the server through a restart (prefect.toml), freed as it expires.
A waiting run names the holder (titanflow.prefect_ops.slot_holder), and frees the slot of one whose flow run has ended.

Why not Prefect's public ``prefect.concurrency.sync.concurrency`` (checked on Prefect 3.9.0 and 3.9.1): it yields no
lease id, so no record can name the lease of a holder that has ended; its renewal gives up after three failed tries
(about 3 s) and trains on with the slot lost; its first renewal takes the client's retries (up to a minute, which the
release would wait for); its release raises out of the block while the server is down; its client takes no transport
(a busy 503 costs 2 s). tests/unit/prefect_ops/test_training_slot.py, in both lanes, fails when its parameters or yield move.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import socket
import threading
import time
from typing import Callable, Iterator
from uuid import UUID

import httpx
from pydantic import BaseModel, Field

from titanflow.prefect_ops.busy_client import slot_client
from titanflow.prefect_ops.slot_holder import PREFIX, SlotHolder, read_holder, record
from titanflow.prefect_ops.slot_holder import forget as _forget
from titanflow.prefect_ops.slot_holder import free_if_ended as _free_if_ended

#: Slots per node: trainings that may run at once on one machine.
SLOTS_PER_NODE = 1
#: Seconds a lease lasts unless renewed (60 s to a day): how long the slot of a holder that died stays taken.
LEASE_S = 120.0
#: Seconds between renewals: four chances before the lease would expire.
RENEW_EVERY_S = LEASE_S / 4
#: Seconds between two "waiting for the training slot" log lines.
WAIT_LOG_EVERY_S = 30.0
#: Seconds between two acquisition attempts, and between two tries of a release the server does not answer.
RETRY_S = 5.0


class HeldSlot(BaseModel):
    """A slot this process holds: the limit, the lease, and the seconds waited for it."""

    name: str = Field(description="the global concurrency limit")
    lease_id: UUID = Field(description="the current lease (a re-acquired slot has a new one)")
    waited_s: float = Field(description="seconds between asking for the slot and getting it")


def limit_name(host: str | None = None) -> str:
    """``titanflow-train-<host>``: the concurrency limit of this machine (``socket.gethostname()``)."""
    return PREFIX + (host or socket.gethostname())


def ensure_limit(name: str, slots: int = SLOTS_PER_NODE) -> None:
    """Create the global concurrency limit ``name`` with ``slots`` if the Prefect API has none by that name."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with slot_client() as client, contextlib.suppress(ObjectAlreadyExists):  # another run created it meanwhile
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


def _answered(err: Exception) -> int | None:  # the server's HTTP status, None when it did not answer
    return err.response.status_code if isinstance(err, httpx.HTTPStatusError) else None


def _try_acquire(client, name: str, holder) -> UUID | None:
    """One attempt: the new lease's id, or None when the slot is taken (HTTP 423)."""
    try:
        return UUID(client.increment_concurrency_slots_with_lease([name], SLOTS_PER_NODE, "concurrency", LEASE_S,
                                                                  holder=holder).json()["lease_id"])
    except httpx.HTTPStatusError as err:
        if _answered(err) != 423:
            raise
    return None


def _acquire(client, name: str, holder, log: logging.Logger, on_wait: Callable[[str], None]) -> tuple[UUID, float]:
    start = next_log = time.monotonic()
    unnamed = False  # the last look found no record: a holder forgets it just before it releases, so look twice
    while (lease_id := _try_acquire(client, name, holder)) is None:
        if _free_if_ended(client, name, log):
            continue
        held_by, now = read_holder(name, client), time.monotonic()
        if now >= next_log and (held_by or unnamed):
            who = (held_by.describe() if held_by
                   else f"a holder that recorded no name (its lease ends within {LEASE_S:.0f} s)")
            message = f"waiting for the training slot {name} (1 slot), held by {who}; waited {now - start:.0f} s"
            log.info(message)
            on_wait(message)
            next_log = now + WAIT_LOG_EVERY_S
        unnamed = held_by is None
        time.sleep(RETRY_S)
    if (waited := time.monotonic() - start) >= 1.0:
        log.info("training slot %s acquired after waiting %.0f s", name, waited)
    return lease_id, waited


def _renew(slot: HeldSlot, recorded: Callable[[object, UUID], None], holder, log: logging.Logger,
           stopping: threading.Event) -> None:
    """Renew the lease every :data:`RENEW_EVERY_S` until ``stopping``: a failure is logged once per outage, a lease the
    server lost is re-acquired (another run holding the slot then is an error: training goes on, the lesser harm)."""
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
                if _answered(err) not in (404, 410):  # the lease is still there, the server did not renew it
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
                    recorded(client, lease_id)  # first, so whoever sees the new lease id also finds it recorded
                    slot.lease_id, failing = lease_id, False
                    log.warning("training slot %s: the lease was lost (server restart or outage) and re-acquired",
                                slot.name)


def _give_back(client, name: str, lease_id: UUID, log: logging.Logger) -> None:
    """Forget the record, release the lease; again every :data:`RETRY_S` while the server does not answer, until the
    lease would expire (Prefect's retries end within a minute; a new client fails at once on a refused connection)."""
    deadline, failed = time.monotonic() + LEASE_S, None
    while True:
        try:
            _forget(name, lease_id)  # a client of its own, as a restarted server needs
            client.release_concurrency_slots_with_lease(lease_id)  # a lease already gone: a no-op
            break
        except Exception as err:  # noqa: BLE001 - a slot left taken is freed by the lease's expiry at worst
            if (_answered(err) or 500) < 500 or time.monotonic() + RETRY_S >= deadline:  # refused, or out of time
                log.warning("training slot %s: not released (%s); the server frees it when the lease expires",
                            name, err)
                return
            if failed is None:
                log.warning("training slot %s: release failed (%s); asking again every %g s until the lease "
                            "expires (%.0f s)", name, err, RETRY_S, LEASE_S)
            failed = err
            time.sleep(RETRY_S)
    if failed is not None:
        log.info("training slot %s released once the server answered again", name)


@contextlib.contextmanager
def training_slot(host: str | None = None, run_id: str | None = None,
                  on_wait: Callable[[str], None] = lambda _: None) -> Iterator[HeldSlot]:
    """Hold this node's training slot for the block, waiting while another run holds it; yields the :class:`HeldSlot`
    (its ``waited_s``: the wait, never part of any task's time). ``run_id`` names the holder in the record; ``on_wait``
    gets each "waiting for the training slot" message (e.g. to update the progress artifact).

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

    def recorded(client, lease_id: UUID) -> None:
        record(client, name, SlotHolder(lease_id=lease_id, flow_run_id=getattr(flow_run, "id", None), run_id=run_id,
                                        flow_run_name=getattr(flow_run, "name", None), host=socket.gethostname(),
                                        since=since))

    with slot_client() as client:
        lease_id, waited = _acquire(client, name, lease_holder, log, on_wait)
        slot = HeldSlot(name=name, lease_id=lease_id, waited_s=round(waited, 3))
        recorded(client, lease_id)
        stopping = threading.Event()
        # the caller's context: its Prefect settings (API URL) and run logger reach the thread
        renewer = threading.Thread(target=contextvars.copy_context().run, daemon=True, name=f"renew-{name}",
                                   args=(_renew, slot, recorded, lease_holder, log, stopping))
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
    """Hold the training slot of every host in ``hosts`` (a Slurm job's nodes) for the block, taken in sorted order so
    two runs whose sets of nodes overlap never each hold a part the other waits for; yields each :class:`HeldSlot`.

    Raises:
        httpx.HTTPStatusError: as :func:`training_slot`.
    """
    with contextlib.ExitStack() as held:
        yield [held.enter_context(training_slot(host, run_id, on_wait)) for host in sorted(set(hosts))]

