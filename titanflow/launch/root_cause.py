"""The root cause of a failed launch: the first failing rank's own error, from the per-rank files torchrun writes.

torchrun (``--log-dir train/ranks``) keeps, per launch, ``<launch>/attempt_<n>/<local rank>/stdout.log``,
``stderr.log`` and, for a rank whose entry point is wrapped in torchelastic's ``@record`` (torchtitan's
trainer loop is), ``error.json`` with the exception and a timestamp. The first failing rank is the one
torchrun names under "Root Cause (first observed failure)" in the launcher's log (the last such
section: the log holds every launch of a retried task): torchrun orders every failure by time, a rank
killed by a signal (which writes no ``error.json``) included, so a rank killed mid-run is named, not
the peer that then lost its connection to it. Its error is its ``error.json``, else the signal
torchrun reports for it, else the last exception line of its ``stderr.log``. Without that section
(a launcher killed before it could print one), the rank with the oldest ``error.json``, else the
first rank whose ``stderr.log`` holds an exception. torchrun's ``ChildFailedError`` banner itself
says only that a child failed: it is never the root cause.

torchrun's order is by the second, and a rank whose peer died fails within milliseconds of it (a forked rank
exits at once), so the peer's failure can come first or in the same second, where torchrun lists the lower rank
first. An error that says only that a peer went away (:func:`lost_peer`) is therefore the root cause only when no
failing rank has another: the other failures of torchrun's report (and of the error files) are read too. (torch
2.13 reports one failure of forked ranks; titan_cfg.forked_torchrun makes it report every one.)

A save or load of torch.distributed.checkpoint that fails raises ``CheckpointException`` on every rank, its message
listing each rank's own traceback: the rank's error is then its own exception in that list (:func:`unwrapped`: a full
disk, not the wrapper).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, Field

#: Longest root-cause message kept (characters): one line of a child's output can be megabytes.
MAX_MESSAGE_CHARS = 2000

#: Bytes read at a time from a rank's stderr.log (the start of a line is all that is matched).
_PIECE_BYTES = 64 * 1024
#: An exception line as Python prints it, under torchrun's ``[rankN]:`` prefix when it adds one.
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?)$")
#: One failure of torchrun's report: its rank (and local rank) and the first line of its traceback ("Signal 9
#: (SIGKILL) received by PID 20117" for a killed rank).
_ENTRY = r"^\s*rank\s*:\s*(\d+)(?:\s*\(local_rank:\s*(\d+)\))?.*?^\s*traceback\s*:\s*([^\n]*)"
_REPORT_ENTRY = re.compile(_ENTRY, re.DOTALL | re.MULTILINE)
#: torchrun's "Root Cause (first observed failure)" section in the launcher's log, with its one failure.
_FIRST_OBSERVED = re.compile(r"Root Cause \(first observed failure\):.*?" + _ENTRY, re.DOTALL | re.MULTILINE)
#: A traceback that is a signal, as torchrun reports a rank killed by one.
_SIGNAL = re.compile(r"^Signal \d+ \(\w+\) received by PID \d+")
#: What a rank raises when a rank it talks to has died: gloo's "Connection closed by peer" and "Connection reset by
#: peer", NCCL's "remote process exited or there was a network error". A consequence, never a cause of its own.
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer|remote process exited")


def lost_peer(message: str) -> bool:
    """Whether a rank's error says only that a peer went away (gloo's or NCCL's words for it): the consequence of
    another rank's failure."""
    return _LOST_PEER.search(message) is not None


class RankError(BaseModel):
    """The first failing rank and its own error."""

    rank: int = Field(description="local rank of the first failing process")
    message: str = Field(description=f"its exception line, at most {MAX_MESSAGE_CHARS} characters")
    source: str = Field(description="the file it was read from (error.json or stderr.log)")


#: The start of one rank's traceback in torch.distributed.checkpoint's CheckpointException, whose message lists the
#: failure of every rank of a save or load that failed (torch 2.13 ``CheckpointException.__str__``).
_RANK_TRACEBACK = re.compile(r"^Traceback \(most recent call last\): \(RANK (\d+)\)$", re.MULTILINE)


def unwrapped(message: str, rank: int) -> str:
    """``message`` of rank ``rank``, or, when it is a CheckpointException listing the ranks' own failures, that rank's
    own exception line, the wrapper named after it: ``OSError: [Errno 28] No space left on device (in
    torch.distributed.checkpoint: CheckpointException ranks:dict_keys([0, 1]))``. A save that failed is said by
    what failed it (a full disk), not by the wrapper every rank of the save raises."""
    blocks = {int(m.group(1)): m.end() for m in _RANK_TRACEBACK.finditer(message)}
    if rank not in blocks:
        return message
    later = [start for start in blocks.values() if start > blocks[rank]]
    block = message[blocks[rank]:min(later) if later else len(message)]
    lines = [m.group(1) for line in block.splitlines() if (m := _EXCEPTION.match(line.strip()))]
    if not lines:
        return message
    return f"{lines[-1]} (in torch.distributed.checkpoint: {message.strip().splitlines()[0]})"


def _bounded(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " ... [cut]"


def _latest_attempt(ranks_dir: Path) -> Path | None:
    """The last attempt of the most recent launch under ``ranks_dir`` (a retry launches anew)."""
    attempts = sorted(ranks_dir.glob("*/attempt_*"), key=lambda p: (p.parent.stat().st_mtime, p.name))
    return attempts[-1] if attempts else None


def _error_file(path: Path) -> tuple[int, str] | None:
    """(timestamp, exception message) of a rank's error.json; None when absent or unreadable (a rank
    killed while writing it)."""
    try:
        error = json.loads(path.read_text())["message"]
        return int(error["extraInfo"]["timestamp"]), error["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _from_error_files(attempt: Path) -> RankError | None:
    """The oldest error.json, one that is more than a lost peer (:func:`lost_peer`) first."""
    found = [(lost_peer(read[1]), read[0], int(path.parent.name), read[1], path)
             for path in attempt.glob("*/error.json") if (read := _error_file(path)) is not None]
    if not found:
        return None
    _, _, rank, message, path = min(found)
    return RankError(rank=rank, message=_bounded(unwrapped(message, rank)), source=str(path))


def _report_failures(launcher_log: str) -> list[tuple[str, str, str]]:
    """(rank, local rank or "", first traceback line) of each failure of torchrun's last failure report in
    ``launcher_log``: the first observed one, then the others it lists under "Failures:"."""
    sections = list(_FIRST_OBSERVED.finditer(launcher_log))
    if not sections:
        return []
    first = sections[-1]
    listed = launcher_log.rfind("Failures:", 0, first.start())
    others = _REPORT_ENTRY.findall(launcher_log[listed:first.start()]) if listed >= 0 else []
    return [first.groups(), *others]


def _from_report(attempt: Path, launcher_log: str) -> RankError | None:
    """The first failure of torchrun's last report (:func:`_report_failures`) whose own error is more than a lost
    peer, else its first observed failure; each with its own error (:func:`_rank_error`)."""
    errors = [error for entry in _report_failures(launcher_log) if (error := _rank_error(attempt, *entry))]
    return next((error for error in errors if not lost_peer(error.message)), errors[0] if errors else None)


def _rank_error(attempt: Path, rank: str, local_rank: str, traceback: str) -> RankError | None:
    """A failure of torchrun's report with its own error: error.json, the signal, or the last exception line of the
    rank's stderr.log."""
    folder = attempt / (local_rank or rank)
    written = _error_file(folder / "error.json")
    if written is not None:
        return RankError(rank=int(folder.name), message=_bounded(unwrapped(written[1], int(folder.name))),
                         source=str(folder / "error.json"))
    if _SIGNAL.match(traceback.strip()):
        return RankError(rank=int(folder.name), message=_bounded(traceback), source="torchrun's launcher log")
    line = _last_exception_line(folder / "stderr.log")
    if line:
        return RankError(rank=int(folder.name), message=_bounded(line), source=str(folder / "stderr.log"))
    return None


def _last_exception_line(stderr: Path) -> str | None:
    """The last exception line of ``stderr``, read in bounded pieces: memory stays bounded however long a
    line is, and only the start of a line (where the exception's name is) is matched."""
    if not stderr.is_file():
        return None
    last, at_line_start = None, True
    with open(stderr, "rb") as handle:
        for piece in iter(lambda: handle.readline(_PIECE_BYTES), b""):
            if at_line_start:
                match = _EXCEPTION.match(piece.decode(errors="replace").strip())
                if match:
                    last = match.group(1)
            at_line_start = piece.endswith(b"\n")
    return last


def first_rank_error(ranks_dir: Path, launcher_log: str = "") -> RankError | None:
    """The root cause of the most recent launch under ``ranks_dir`` (module docstring); ``launcher_log``:
    the launcher's own output (train.log), for torchrun's "first observed failure". None when no rank
    left an error (a launch killed from outside, a timeout)."""
    attempt = _latest_attempt(ranks_dir)
    if attempt is None:
        return None
    found = _from_report(attempt, launcher_log) or _from_error_files(attempt)
    if found is not None:
        return found
    ranks = sorted((p for p in attempt.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for rank in ranks:
        line = _last_exception_line(rank / "stderr.log")
        if line:
            return RankError(rank=int(rank.name), message=_bounded(line), source=str(rank / "stderr.log"))
    return None
