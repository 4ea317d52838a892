"""torchrun whose ranks are forked from one process that has already imported torch and torchtitan.

    TITANFLOW_JOB=runs/<id>/job/job.json python -m titan_cfg.forked_torchrun --standalone --nproc_per_node=2 \\
        --start-method fork --run-path <repo>/titan_cfg/forked_rank.py --module titan_cfg.config_registry ...

The arguments are torchrun's own (``torch.distributed.run``). torchrun starts a ``-m`` module's ranks as new Python
processes, so each imports torch and torchtitan afresh: about 3 s and twice that in CPU time per rank on the cpu
target, a quarter of a short launch (benchmarks/launch_phases.py). A ``--run-path`` script is a function entry
instead, and torchrun's ``--start-method fork`` starts it in a fork of its own process; this module imports
torchtitan and applies the compat layers there first (:func:`titan_cfg.entry.prepare`), so every rank starts with
them in place. Only targets with ``fork_ranks`` (cpu) launch this way: a Neuron or CUDA runtime must not be
initialised in a process that later forks.

Two differences from ranks started afresh are mended here. torchrun's report of a forked launch names one failed
rank only (:func:`report_every_failure`). And a fork inherits the signal handlers torchrun installs in its own
process before it starts the ranks (SIGTERM raises an exception, which Python runs only between bytecodes: a rank
blocked in a collective then ignores the SIGTERM torchrun sends when its peer dies); each forked rank takes back
the handlers this process started with (:func:`restore_startup_handlers`), as a new Python would have them.
"""

from __future__ import annotations

import gc
import signal
import sys

#: The signals torchrun's agent handles in its own process (torch 2.13: TORCHELASTIC_SIGNALS_TO_HANDLE's default).
AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: Their handlers as this process started, before torchrun's (:func:`record_startup_handlers`).
startup_handlers: dict[signal.Signals, object] = {}


def record_startup_handlers() -> None:
    """Keep this process's handlers of :data:`AGENT_SIGNALS` (those of a new Python) for the forked ranks."""
    startup_handlers.update({sig: signal.getsignal(sig) for name in AGENT_SIGNALS if (sig := getattr(signal, name, None))})


def restore_startup_handlers() -> None:
    """In a forked rank: the handlers :func:`record_startup_handlers` kept, in place of torchrun's agent's."""
    for sig, handler in startup_handlers.items():
        signal.signal(sig, handler)


def report_every_failure() -> bool:
    """Make torchrun's report of forked ranks list every rank that had failed when it looked, as its report of ranks
    started afresh does; returns whether it patched (False: done already).

    torch 2.13's ``MultiprocessContext._poll`` reports only the rank ``ProcessContext.join`` raised for, the first
    failed one it happens to find, and ends the others. A forked rank that loses its peer exits within milliseconds,
    so when rank 1 is killed, rank 0's "Connection closed by peer" can be the only failure reported and rank 1's
    signal is lost. The patch reads every rank's exit code before torch's poll (reaping those that ended), and adds
    each that had failed on its own to the failures torch reports; titanflow.launch.root_cause then names the one
    that did more than lose a peer.
    """
    from torch.distributed.elastic.multiprocessing import api

    upstream = api.MultiprocessContext._poll
    if getattr(upstream, "reports_every_failure", False):
        return False

    def poll(self):
        # before torch's join, which ends the other ranks once it finds one failed (their codes are then its doing)
        ended = {rank: proc.exitcode for rank, proc in enumerate(self._pc.processes)} if self._pc is not None else {}
        result = upstream(self)
        if result is not None and result.failures:
            for rank, code in ended.items():
                if code not in (None, 0) and rank not in result.failures:
                    result.failures[rank] = api.ProcessFailure(local_rank=rank, pid=self._pc.processes[rank].pid,
                                                               exitcode=code, error_file=self.error_files[rank])
        return result

    poll.reports_every_failure = True
    api.MultiprocessContext._poll = poll
    return True


def main(argv: list[str] | None = None) -> None:
    """:func:`record_startup_handlers`, :func:`titan_cfg.entry.prepare` and :func:`report_every_failure`, then
    torchrun's ``main`` with ``argv`` (default: this command's arguments)."""
    from titan_cfg.entry import prepare  # lazy: torch

    record_startup_handlers()
    prepare()
    report_every_failure()
    # What is imported by now lives until exit: frozen, neither this process's collections nor a rank's walk it (a
    # rank's would write to every object's header, copying the pages it shares with this process), nor the exit's.
    gc.freeze()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    # ``python -m`` runs this file as __main__, a second copy of the module: the handlers must be recorded in the
    # importable titan_cfg.forked_torchrun, the one each forked rank's forked_rank.py imports and restores from.
    import titan_cfg.forked_torchrun

    titan_cfg.forked_torchrun.main()
