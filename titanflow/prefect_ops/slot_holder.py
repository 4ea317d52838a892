"""Who holds a training slot: a record in a Prefect Variable beside the limit, and freeing the slot of a holder whose
flow run has ended.

Prefect keeps a lease's holder (``ConcurrencyLeaseHolder``, a flow run) with the lease, but (checked on Prefect 3.9.0
and 3.9.1) its API reads holders back for tag limits alone (a v1 limit's task runs), never for a global limit, and its
server frees the lease of a task run that ends, never of a flow run. So the slot records its holder here, and a run
waiting for the slot (or a server starting) frees the lease of a holder that has ended.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
from uuid import UUID

from pydantic import BaseModel, Field

from titanflow.prefect_ops.busy_client import slot_client

#: Name prefix of the per-node limits (titanflow.prefect_ops.slot).
PREFIX = "titanflow-train-"


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


def holder_variable(name: str) -> str:
    """The Prefect Variable naming the holder of limit ``name`` (letters, digits, ``-`` and ``_`` only)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name).lower()


def _given_or_own(client):
    return contextlib.nullcontext(client) if client is not None else slot_client()


def read_holder(name: str, client=None) -> SlotHolder | None:
    """The recorded holder of limit ``name``, or None when none is recorded (``client``: a Prefect sync client,
    default :func:`~titanflow.prefect_ops.busy_client.slot_client`)."""
    with _given_or_own(client) as client:
        variable = client.read_variable_by_name(holder_variable(name))
    return SlotHolder.model_validate(variable.value) if variable is not None and variable.value else None


def record(client, name: str, holder: SlotHolder) -> None:
    """Record ``holder`` as the holder of limit ``name`` (its Prefect Variable, made or overwritten)."""
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    value = holder.model_dump(mode="json")
    try:
        client.create_variable(VariableCreate(name=holder_variable(name), value=value))
    except ObjectAlreadyExists:
        client.update_variable(VariableUpdate(name=holder_variable(name), value=value))


def forget(name: str, lease_id: UUID, client=None) -> None:
    """Remove the holder record of limit ``name`` if it still names ``lease_id`` (call it while the slot is still held,
    so no next holder can have recorded itself in between); ``client``: as :func:`read_holder`."""
    from prefect.exceptions import ObjectNotFound

    with _given_or_own(client) as client:
        held = read_holder(name, client)
        if held is not None and held.lease_id == lease_id:
            with contextlib.suppress(ObjectNotFound):  # one already gone
                client.delete_variable_by_name(holder_variable(name))


def free_if_ended(client, name: str, log: logging.Logger) -> bool:
    """Release the lease of the recorded holder of ``name`` when its flow run has ended (a final state, or gone from
    the server; never while it may still train, nor for a holder outside a flow run); True if it did."""
    from prefect.exceptions import ObjectNotFound

    holder = read_holder(name, client)
    if holder is None or holder.flow_run_id is None:
        return False
    try:
        state = client.read_flow_run(holder.flow_run_id).state
        ended = state.name if state is not None and state.is_final() else None
    except ObjectNotFound:
        ended = "gone"
    if ended is None:
        return False
    forget(name, holder.lease_id, client)  # first: once the slot is free, the next holder records itself
    client.release_concurrency_slots_with_lease(holder.lease_id)  # a lease already gone: a no-op
    log.warning("training slot %s: its holder %s has ended (%s); its slot is freed", name, holder.describe(), ended)
    return True


def release_stale_slots(api_url: str) -> list[str]:
    """At a server's start: free every ``titanflow-train-*`` slot held by a flow run that has ended, and return their
    names; slots of live runs (renewed through a restart) and without a recorded holder are left to their leases."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), slot_client() as client:
        return [limit.name for limit in client.read_global_concurrency_limits(limit=200) if limit.name.startswith(PREFIX)
                and limit.active_slots and free_if_ended(client, limit.name, logging.getLogger(__name__))]
