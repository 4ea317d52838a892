"""The root cause of a failed launch: the first failing rank's own error, from the per-rank files torchrun writes.

torchrun (``--log-dir train/ranks``) keeps, per launch, ``<launch>/attempt_<n>/<local rank>/stdout.log``,
``stderr.log`` and, for a rank whose entry point is wrapped in torchelastic's ``@record`` (torchtitan's
trainer loop is), ``error.json`` with the exception and a timestamp. The first failing rank is the
one whose ``error.json`` is oldest; when no rank wrote one (an error before the trainer loop, such
as a checkpoint that does not load), it is the rank torchrun's "Root Cause (first observed failure)"
names in the launcher's log, and its error is the last exception line of its ``stderr.log``.
torchrun's own ``ChildFailedError`` banner says only that a child failed: it is never the root cause.
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
#: The rank of torchrun's "Root Cause (first observed failure)" section in the launcher's log.
_FIRST_OBSERVED = re.compile(r"Root Cause \(first observed failure\):.*?\n\s*rank\s*:\s*(\d+)", re.DOTALL)


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


def _from_error_files(attempt: Path) -> RankError | None:
    found = []
    for path in attempt.glob("*/error.json"):
        try:
            error = json.loads(path.read_text())["message"]
            found.append((int(error["extraInfo"]["timestamp"]), int(path.parent.name), error["message"], path))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a rank killed while writing it: the others tell
    if not found:
        return None
    _, rank, message, path = min(found)
    return RankError(rank=rank, message=_bounded(message), source=str(path))


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
    from_files = _from_error_files(attempt)
    if from_files is not None:
        return from_files
    observed = _FIRST_OBSERVED.search(launcher_log)
    ranks = sorted((p for p in attempt.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if observed:
        ranks.sort(key=lambda p: p.name != observed.group(1))  # torchrun's first observed failure first
    for rank in ranks:
        line = _last_exception_line(rank / "stderr.log")
        if line:
            return RankError(rank=int(rank.name), message=_bounded(line), source=str(rank / "stderr.log"))
    return None
