"""Where one training launch's wall time goes, rank code of this tree against a baseline revision's, side by side.

    .venv/bin/python benchmarks/launch_phases.py                       # baseline HEAD, 3 steps, 2 pairs
    .venv/bin/python benchmarks/launch_phases.py --baseline b04b04e --steps 6 --pairs 3

Renders the native cpu job once (titanflow.launch.render, random init, the embedded tiny model), then runs its own
``job/launch.sh`` by ``bash``, alternating two settings, each launch in an empty dump folder:

- **now**: as rendered, run from this tree (``PYTHONPATH`` and the working directory, which ``python -m`` puts first
  on ``sys.path``: the ranks run its ``titan_cfg``), as the flow runs it (titanflow.launch.torchrun);
- **baseline**: the same script with ``PYTHONPATH`` and the working directory a git worktree of ``--baseline``
  (default ``HEAD``, so uncommitted changes to the rank code are what is measured), and the torchrun line that
  revision renders for the same job (``launch_line`` of its titanflow.launch.render: how it starts the ranks).

Phases come from rank 0's torchtitan log lines (``[titan] <date> <time>,<ms>``: torchtitan's logger, wall clock)
against the launch's start and end on this machine's clock, so they add up to the wall time:

| phase | from | to |
|---|---|---|
| start + imports | launch | ``torchtitan version`` (torchrun, Python, torch and torchtitan imported) |
| build | ``torchtitan version`` | ``Training starts`` (mesh, model, tokenizer, data loader, checkpointer) |
| step 1 | ``Training starts`` | step 1's line (first allocations; with flex attention, the block-mask builder's compile) |
| steps 2..N | step 1's line | step N's line |
| save + sleep | step N's line | ``Training completed`` (last checkpoint; rank 0 sleeps 2 s, torchtitan's own) |
| probe + close | ``Training completed`` | ``Process group destroyed`` (titan_cfg.probe, checkpointer, process group) |
| exit | ``Process group destroyed`` | the launch's end (interpreter teardown of every rank, torchrun's exit) |

Per launch also: user and system CPU seconds of the whole process tree (``os.wait4`` of bash). The table gives the
medians per setting and their ratio, and whether both settings logged the same loss at every step.
Wall and CPU times are this machine's at the time of the run: compare the rows of one run, not figures of two.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.launch_pairs import alternate, print_comparison, render, work_folder  # noqa: E402
from titanflow.launch.metrics import parse_step_line  # noqa: E402

#: torchtitan's log prefix: ``[titan] 2026-12-01 23:31:08,667 - root - INFO - <message>``.
_TITAN_LINE = re.compile(r"\[titan\] (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - \S+ - \w+ - (?P<message>.*)")
#: (phase, the message that ends it); None: the launch's end.
PHASES = [("start + imports", "torchtitan version"), ("build", "Training starts"), ("step 1", "step:  1 "),
          ("steps 2..N", None), ("save + sleep", "Training completed"), ("probe + close", "Process group destroyed"),
          ("exit", None)]


def phase_marks(lines: list[str], steps: int) -> dict[str, float]:
    """Epoch seconds of each phase's end mark in rank 0's ``lines`` (PHASES); ``steps`` names the last step line."""
    marks: dict[str, float] = {}
    for line in lines:
        match = _TITAN_LINE.search(line)
        if match is None:
            continue
        at = dt.datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        message = match["message"]
        for phase, mark in PHASES:
            if mark is not None and message.startswith(mark) and phase not in marks:
                marks[phase] = at
        row = parse_step_line(message)
        if row is not None and row["step"] == steps:
            marks["steps 2..N"] = at
    return marks


def phases(result: dict, steps: int) -> dict:
    """A launch's wall and CPU seconds and losses (benchmarks.launch_pairs.launch), and each phase's seconds
    (PHASES, from rank 0's log lines of a ``steps``-step launch), which sum to the wall time.

    Raises:
        SystemExit: a phase's end is not in the log.
    """
    marks = phase_marks(result["lines"], steps)
    missing = [phase for phase, mark in PHASES if mark is not None and phase not in marks]
    if missing:
        raise SystemExit(f"no line of the launch's log marks the end of {', '.join(missing)}")
    figures = {key: result[key] for key in ("wall_s", "user_s", "sys_s", "losses")}
    before = result["start"]
    for phase, _ in PHASES:
        at = marks.get(phase, result["end"])
        figures[phase] = at - before
        before = at
    return figures


def baseline_worktree(revision: str, work: Path) -> Path:
    """A detached git worktree of ``revision`` under ``work`` (removed by :func:`remove_worktree`)."""
    path = work / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), revision], check=True)
    return path


def baseline_launch_line(tree: Path, job: Path) -> list[str]:
    """The torchrun argv the revision checked out at ``tree`` renders for the job in folder ``job`` (its
    titanflow.launch.render ``launch_line``, run by this Python with ``tree`` first on the path)."""
    code = ("import json, sys; from pathlib import Path; from titan_cfg.job import Job; "
            "from titanflow.launch.render import launch_line; path = Path(sys.argv[1]); "
            "print(json.dumps(launch_line(Job.read(path), path)[0]))")
    out = subprocess.run([sys.executable, "-c", code, str(job / "job.json")], cwd=tree, check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(tree)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def remove_worktree(path: Path) -> None:
    """Remove the worktree :func:`baseline_worktree` made."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the revision whose rank code is compared (default HEAD)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per launch (default 3)")
    parser.add_argument("--pairs", type=int, default=2, help="launches per setting (default 2)")
    parser.add_argument("--work", type=Path, help="where the job and logs go, kept (default: a temporary folder, "
                        "removed at the end)")
    args = parser.parse_args()
    with work_folder(args.work, "titanflow-launch-phases-") as work:
        job = render(work, args.steps)
        script = (job / "launch.sh").read_text()
        pythonpath = f"export PYTHONPATH={REPO}\n"
        if pythonpath not in script:
            raise SystemExit(f"{job / 'launch.sh'} does not set {pythonpath.strip()}: nothing to swap")
        tree = baseline_worktree(args.baseline, work)
        baseline = f"baseline ({args.baseline})"
        try:
            exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
            baseline_script = script.replace(pythonpath, f"export PYTHONPATH={tree}\n").replace(
                exec_line, f"exec {shlex.join(baseline_launch_line(tree, job))}")
            (job / "launch-baseline.sh").write_text(baseline_script)
            runs = alternate({"now": (job / "launch.sh", REPO), baseline: (job / "launch-baseline.sh", tree)},
                             job.parent / "train", work, args.pairs, lambda result: phases(result, args.steps))
        finally:
            remove_worktree(tree)
    print_comparison(runs, "now", baseline, ["wall_s", "user_s", "sys_s", *(phase for phase, _ in PHASES)],
                     args.steps, args.pairs, measure_header="measure (s)")


if __name__ == "__main__":
    main()
