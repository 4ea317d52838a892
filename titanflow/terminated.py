"""SIGTERM as an exception the ``titanflow`` command can catch.

Prefect raises its own ``TerminationSignal`` in a flow for SIGTERM, so the run is recorded cancelled; then (Prefect
3.9's ``capture_sigterm``) it hands the signal on to the handler it found. Left at the default, that handler ends the
process there, before the command prints the run's record. The command (titanflow.cli) installs
:func:`raise_terminated` first: the signal handed on is raised as :class:`Terminated`, which the command catches,
prints the record and exits 143. Kept apart and import-free: the command line needs it before it imports Prefect.
"""

from __future__ import annotations


class Terminated(BaseException):
    """The process was sent SIGTERM (a ``kill``, a worker's cancel, a cancel watch's)."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise :class:`Terminated` in the main thread."""
    raise Terminated()
