"""``titanflow run`` on a pseudo-terminal, and the text a terminal shows after what a program wrote to it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

TITANFLOW = Path(sys.executable).parent / "titanflow"
#: One thing a terminal is written: a CSI control sequence (its parameters, its letter), an OSC one, or a character.
WRITTEN = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|(.)", re.DOTALL)


def run_on_terminal(*args: str, env: dict, columns: int = 110) -> tuple[int, str]:
    """(exit code, what the terminal shows at the end: :func:`screen_text`) of ``titanflow run ARGS`` with stdout
    and stderr on one pseudo-terminal of ``columns`` x 40."""
    master, replica = pty.openpty()
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([str(TITANFLOW), "run", *args], stdin=subprocess.DEVNULL, stdout=replica, stderr=replica,
                            env=env, start_new_session=True)
    os.close(replica)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=900)
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    return proc.returncode, screen_text(b"".join(chunks).decode("utf-8", "replace"))


def screen_text(written: str) -> str:
    """The lines a terminal shows after ``written``: characters, CR, LF, cursor up (CSI n A) and erase in line
    (CSI 2 K) done as a terminal does them, which is how rich's live row redraws itself and is cleared at the
    end; every other control sequence (colours, cursor visibility) changes no text and is dropped. A terminal
    emulator library (pyte) would do this and more; it is not a dependency of the project for one test."""
    lines, row, col = [[]], 0, 0
    for match in WRITTEN.finditer(written):
        params, command, char = match.groups()
        if command == "A":
            row = max(0, row - int(params or 1))
        elif command == "K" and params == "2":
            lines[row] = []
        elif char == "\n":
            row += 1
            lines += [[] for _ in range(row + 1 - len(lines))]
        elif char == "\r":
            col = 0
        elif char is not None:
            line = lines[row]
            line += [" "] * (col - len(line))
            line[col:col + 1] = [char]
            col += 1
    return "\n".join("".join(line).rstrip() for line in lines).strip("\n")
