"""The flow process's peak resident set over one task, from Linux's own high-water mark.

The tasks of a scenario run one after another in the flow's process, so the kernel's peak resident set
of that process (``VmHWM`` in ``/proc/self/status``), reset to the current resident set when a task
starts (writing ``5`` to ``/proc/self/clear_refs``, Linux 4.0 and later: proc(5)), is that task's peak.
It is resident memory as the kernel counts it (heap, mapped files touched, every thread), not Python's
allocations (tracemalloc) nor an increase over a baseline: it includes what the process already held
when the task began (imports, earlier tasks' leftovers), which the machine had to provide all the same.
Processes a task starts are not in it (torchrun's ranks: ``TrainResult.peak_rss_bytes``).

A reset also lowers ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the process, which reads the same
mark; nothing in the flow process reads that (the ranks read their own).
"""

from __future__ import annotations

import re
from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB$", re.MULTILINE)


def reset_peak_rss() -> bool:
    """Set this process's peak resident set to its current one; False where the kernel offers no reset
    (not Linux, or /proc not writable), then :func:`peak_rss_bytes` would be the process's lifetime peak."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int | None:
    """This process's peak resident set in bytes since its start or the last :func:`reset_peak_rss`
    (``VmHWM``, kB x 1024); None without /proc/self/status."""
    try:
        found = _HWM.search(STATUS.read_text())
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None
