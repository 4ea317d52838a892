"""What each rank of a forked launch runs (``torchrun --start-method fork --run-path <this file>``, written by
titanflow.launch.render for a target with ``fork_ranks``): :func:`titan_cfg.entry.main`, in the process torchrun
forked from :mod:`titan_cfg.forked_torchrun`, which has already imported torchtitan and applied the compat layers;
first it takes back the signal handlers that process started with (torchrun's agent has since installed its own).

A forked rank has its launcher's command line, and ``/proc/<pid>/environ`` shows the environment the launcher
started with, without the ``RANK`` torchrun set after the fork; so the rank names itself ``titan-rank<RANK>``
(the name ``ps -o comm``, ``top`` and ``pgrep`` show) for a person, or a test, looking for one rank.
"""

import ctypes
import os

#: prctl(2) option that sets the calling thread's name, which for the main thread is the process's (15 bytes).
PR_SET_NAME = 15


def process_name(rank: str) -> bytes:
    """The name a forked rank takes: ``titan-rank<rank>`` (at most 15 bytes, prctl's limit)."""
    return f"titan-rank{rank}".encode()[:15]


def name_this_process(rank: str) -> None:
    """Set this process's name (:func:`process_name`) with prctl(PR_SET_NAME); a libc without prctl leaves it."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is not None:
        prctl(PR_SET_NAME, ctypes.c_char_p(process_name(rank)), 0, 0, 0)


if __name__ == "__main__":  # torchrun's --run-path runs this file as __main__, in the forked rank
    from titan_cfg.entry import main
    from titan_cfg.forked_torchrun import restore_startup_handlers

    restore_startup_handlers()
    name_this_process(os.environ.get("RANK", "?"))
    main()
