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
#: torchrun's "Root Cause (first observed failure)" section in the launcher's log: the rank (and local rank)
#: and the first line of its traceback ("Signal 9 (SIGKILL) received by PID 20117" for a killed rank).
_FIRST_OBSERVED = re.compile(r"Root Cause \(first observed failure\):.*?\n\s*rank\s*:\s*(\d+)"
                             r"(?:\s*\(local_rank:\s*(\d+)\))?.*?\n\s*traceback\s*:\s*([^\n]*)", re.DOTALL)
#: A traceback that is a signal, as torchrun reports a rank killed by one.
_SIGNAL = re.compile(r"^Signal \d+ \(\w+\) received by PID \d+")


class RankError(BaseModel):
    """The first failing rank and its own error."""

    rank: int = Field(description="local rank of the first failing process")
    message: str = Field(description=f"its exception line, at most {MAX_MESSAGE_CHARS} characters")
    source: str = Field(description="the file it was read from (error.json or stderr.log)")


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
    found = [(read[0], int(path.parent.name), read[1], path)
             for path in attempt.glob("*/error.json") if (read := _error_file(path)) is not None]
    if not found:
        return None
    _, rank, message, path = min(found)
    return RankError(rank=rank, message=_bounded(message), source=str(path))


def _from_first_observed(attempt: Path, launcher_log: str) -> RankError | None:
    """The rank torchrun's last "first observed failure" section names, with its own error."""
    sections = _FIRST_OBSERVED.findall(launcher_log)
    if not sections:
        return None
    rank, local_rank, traceback = sections[-1]
    folder = attempt / (local_rank or rank)
    written = _error_file(folder / "error.json")
    if written is not None:
        return RankError(rank=int(folder.name), message=_bounded(written[1]), source=str(folder / "error.json"))
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
    found = _from_first_observed(attempt, launcher_log) or _from_error_files(attempt)
    if found is not None:
        return found
    ranks = sorted((p for p in attempt.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for rank in ranks:
        line = _last_exception_line(rank / "stderr.log")
        if line:
            return RankError(rank=int(rank.name), message=_bounded(line), source=str(rank / "stderr.log"))
    return None
