"""Prefect's sync client for the training slot's calls, asking again within milliseconds when the server is busy.

A Prefect server on SQLite answers 503 to a write that met another request's write between its read and its write
(SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out). The conflict is over within milliseconds, but Prefect's client
waits 2 s before its first retry (2**n s, or the server's Retry-After: one backoff for every call) and sleeps so after
its last try too. Measured on a running server (native, cpu, 2 steps, debug log of ``prefect.client``): 3 runs of 4
waited 2.1-2.3 s for the slot and one 2.3 s more to give it back, each a single 503 of the slot's update or the holder
record's delete. The client is Prefect's own, given :class:`BusyRetries` through ``get_client``'s documented
``httpx_settings``: no Prefect module is changed.
"""

from __future__ import annotations

import time

import httpx

#: Seconds between two tries of a request the server answered 503, and the number of quick tries before Prefect's own
#: retries take over.
BUSY_RETRY_S = 0.05
BUSY_TRIES = 40


class BusyRetries(httpx.BaseTransport):
    """An httpx transport that sends a request again through ``inner`` (default: httpx's own) every
    :data:`BUSY_RETRY_S`, at most :data:`BUSY_TRIES` times, while the server answers 503; any other answer, and the
    last, go to Prefect's client as they came. A transport of its own takes no proxy from the environment (httpx mounts
    those on its default transport only): the Prefect API is reached directly."""

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
    """Prefect's sync client (``get_client(sync_client=True)``, the current API settings) with :class:`BusyRetries` as
    its transport; a context manager, as Prefect's client is."""
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True, httpx_settings={"transport": BusyRetries()})
