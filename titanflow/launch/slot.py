"""One training at a time per node, with a Prefect global concurrency limit.

Every scenario run holds the slot of its node while ``torchrun`` trains: a nightly
suite, a deployment run started by hand and a CLI run on the same machine queue for
it instead of sharing the cores or the accelerators. The limit is Prefect's own
(visible and adjustable in the UI under Concurrency), named ``titanflow-train-<host>``
with 1 slot; it is created on first use when missing, so no set-up step can be forgotten.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Iterator

#: Slots per node: trainings that may run at once on one machine.
SLOTS_PER_NODE = 1
#: Name prefix of the per-node limits.
PREFIX = "titanflow-train-"


def limit_name(host: str | None = None) -> str:
    """``titanflow-train-<host>``: the concurrency limit of this machine (``socket.gethostname()``)."""
    return PREFIX + (host or socket.gethostname())


def ensure_limit(name: str, slots: int = SLOTS_PER_NODE) -> None:
    """Create the global concurrency limit ``name`` with ``slots`` if the Prefect API has none by that name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another run created it meanwhile
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


def release_stale_slots(api_url: str) -> list[str]:
    """Free every occupied ``titanflow-train-*`` slot on the server at ``api_url``; returns the limits freed.

    For a server that has just started, when no flow run of it can be training: Prefect keeps slot
    leases apart from the slot counts, so a server stopped while a run trained can come back with
    the slot counted as taken and nobody to release it, and every later training would wait.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
    from prefect.settings import PREFECT_API_URL, temporary_settings

    freed = []
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        for limit in client.read_global_concurrency_limits(limit=200):
            if limit.name.startswith(PREFIX) and limit.active_slots:
                client.update_global_concurrency_limit(limit.name, GlobalConcurrencyLimitUpdate(active_slots=0))
                freed.append(limit.name)
    return freed


@contextlib.contextmanager
def training_slot(host: str | None = None) -> Iterator[str]:
    """Hold this node's training slot for the block (waits while another run holds it); yields the limit's name.

    Raises:
        prefect.concurrency ConcurrencySlotAcquisitionError: the API cannot grant the slot.
    """
    from prefect.concurrency.sync import concurrency

    name = limit_name(host)
    ensure_limit(name)
    with concurrency(name, occupy=1, strict=True):
        yield name
