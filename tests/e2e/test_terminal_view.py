"""End to end on CPU: ``titanflow run`` on a terminal (a pseudo-terminal for stdout and stderr) shows the progress
view (titanflow.run.console) instead of the Prefect log, then the summary as in every mode. One 3-step run of the
native scenario (about a minute on 2 cores). Every other end-to-end test reads ``titanflow run`` through pipes: the
Prefect log, as before.
"""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from titanflow.run.summary import read_summary

pytestmark = pytest.mark.e2e

TITANFLOW = Path(sys.executable).parent / "titanflow"
#: One thing a terminal is written: a CSI control sequence (its parameters, its letter), an OSC one, or a character.
WRITTEN = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|(.)", re.DOTALL)
#: The start of a line of Prefect's console handler (logging.yml's ``standard`` format: ``12:01:02.345 | INFO    |``).
PREFECT_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| [A-Z]+ +\|", re.MULTILINE)


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


def test_a_terminal_gets_the_progress_view_then_the_summary(prefect_api, tmp_path):
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "TERM": "xterm-256color"}
    code, shown = run_on_terminal("native", "--target", "cpu", "--steps", "3", "--run-id", "tty",
                                  "--runs-dir", str(tmp_path), env=env)
    print(f"\n{shown}")
    summary = read_summary(tmp_path / "tty" / "summary.json")
    assert code == 0 and summary.verdict == "pass", shown[-3000:]
    for task in ("pull_weights", "render_config", "compile_warmup", "train", "export", "validate", "compare_loss"):
        assert re.search(rf"^✓ {task} +{summary.timings_s[task]:.1f} s", shown, re.MULTILINE), task
    # training's status line: its last step as torchtitan logged it, tokens/s of both ranks
    last = summary.train.losses[-1]
    assert re.search(rf"^✓ train .* 3/3 steps · loss {last:.4f} · \d+ tokens/s$", shown, re.MULTILINE)
    assert not PREFECT_LOG_LINE.search(shown)  # no Prefect log line
    assert re.search(r"^verdict +pass$", shown, re.MULTILINE)  # the summary, as in every mode
    assert shown.endswith(f"prefect flow run {summary.flow_run_id}: Completed")
