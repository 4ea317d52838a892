"""What resume and task caching save, side by side in one run (docs/resume-and-caching.md).

    .venv/bin/python benchmarks/resume_cache.py                  # every row, about 12 minutes on 2 cores
    .venv/bin/python benchmarks/resume_cache.py --only resume    # or --only cache

Every row is real ``titanflow run`` commands of the native cpu scenario's golden workload (10 steps, random
init unless said), against one local Prefect server started here (so no row pays a temporary server's start):

- **resume**: an uninterrupted run with a full-state save every 3 steps; the same run with its flow process
  SIGKILLed once step 5 is logged, then ``titanflow run --resume``. Columns: wall time of each command (s), steps
  trained over all launches, steps trained twice, and whether the resumed curve equals the uninterrupted one.
- **cache**: per case, a cold run (empty asset cache ``$TITANFLOW_CACHE`` and empty Prefect result storage) and an
  identical re-run (warm): wall times, their ratio (the goal is warm <= 0.5 x cold), the tasks Prefect answered
  from its cache, and each task's seconds cold / warm. Cases: ``random`` (the default run; cold builds the
  tokenizer, dataset and tiny model), ``pretrained`` (cold also pretrains the tiny checkpoint) and ``compile``
  (``--compile true``: cold also warms inductor's cache).

Wall times are this machine's at the time of the run: compare rows of one run, not figures of two.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.launch.metrics import log_lines, parse_step_line  # noqa: E402
from titanflow.prefect_ops import server  # noqa: E402
from titanflow.record.summary import RunSummary, read_summary  # noqa: E402

TITANFLOW = REPO / ".venv" / "bin" / "titanflow"
#: The resume row: a full-state save every INTERVAL steps; the flow process is killed once KILL_AFTER_STEP is logged.
INTERVAL, KILL_AFTER_STEP = 3, 5
#: The cache rows: case -> options of `titanflow run native --target cpu`.
CACHE_CASES = {"random": [], "pretrained": ["--init", "pretrained"], "compile": ["--compile", "true"]}


def titanflow_run(args: list[str], env: dict[str, str], kill_after_step: int | None = None,
                  run_dir: Path | None = None) -> float:
    """Run ``titanflow <args>``; with ``kill_after_step``, SIGKILL its process group once ``run_dir``'s
    train.log has that many step lines. Returns the wall time (s).

    Raises:
        RuntimeError: the command failed (not killed by us), with its output's tail.
    """
    started = time.monotonic()
    proc = subprocess.Popen([str(TITANFLOW), *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if kill_after_step is not None:
        while proc.poll() is None and len(trained_steps(run_dir / "train.log")) < kill_after_step:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    output, _ = proc.communicate()
    if kill_after_step is None and proc.returncode != 0:
        raise RuntimeError(f"titanflow {' '.join(args)} exited {proc.returncode}:\n{output[-3000:]}")
    return time.monotonic() - started


def trained_steps(train_log: Path) -> list[int]:
    """Every step line of train.log, all launches (a step trained twice counts twice)."""
    return [row["step"] for row in map(parse_step_line, log_lines(train_log)) if row]


def summary(run_dir: Path) -> RunSummary:
    """The run's summary.json, validated."""
    return read_summary(run_dir / "summary.json")


def wait_for_no_training(run_dir: Path, seconds: float = 60) -> None:
    """Until no process names ``run_dir`` (the ranks end with their killed flow process within seconds)."""
    import psutil

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(str(run_dir) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
            return
        time.sleep(0.5)


def resume_rows(work: Path, env: dict[str, str]) -> pd.DataFrame:
    """The resume table: uninterrupted against killed at KILL_AFTER_STEP and resumed."""
    runs = work / "resume"
    base = ["run", "native", "--target", "cpu", "--checkpoint-interval", str(INTERVAL), "--runs-dir", str(runs)]
    whole_s = titanflow_run([*base, "--run-id", "whole"], env)
    killed_s = titanflow_run([*base, "--run-id", "killed"], env, kill_after_step=KILL_AFTER_STEP,
                             run_dir=runs / "killed")
    wait_for_no_training(runs / "killed")
    resumed_s = titanflow_run(["run", "--resume", "killed", "--runs-dir", str(runs)], env)
    whole, resumed = summary(runs / "whole"), summary(runs / "killed")
    rows = []
    for name, run, wall in (("uninterrupted", whole, whole_s), ("killed + resumed", resumed, killed_s + resumed_s)):
        steps = trained_steps(runs / run.run_id / "train.log")
        rows.append({"run": name, "wall_s": round(wall, 1), "commands": 1 if run is whole else 2,
                     "steps_trained": len(steps), "steps_trained_twice": len(steps) - len(set(steps)),
                     "resumed_from_step": run.train.resumed_from_step if run.train else None,
                     "verdict": run.verdict, "curve_equal": run.losses == whole.losses})
    return pd.DataFrame(rows)


def cache_rows(work: Path, env: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cache table (one row per case) and the per-task seconds cold / warm."""
    rows, tasks = [], []
    for case, options in CACHE_CASES.items():
        case_env = env | {"TITANFLOW_CACHE": str(work / "cache" / case / "assets"),
                          "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(work / "cache" / case / "results")}
        runs = work / "cache" / case / "runs"
        walls = [titanflow_run(["run", "native", "--target", "cpu", *options, "--run-id", when, "--runs-dir",
                                str(runs)], case_env) for when in ("cold", "warm")]
        cold, warm = summary(runs / "cold"), summary(runs / "warm")
        rows.append({"case": case, "cold_s": round(walls[0], 1), "warm_s": round(walls[1], 1),
                     "warm/cold": round(walls[1] / walls[0], 2), "goal_met": walls[1] <= 0.5 * walls[0],
                     "cached_warm": ",".join(warm.cached_tasks), "curve_equal": warm.losses == cold.losses})
        for task in dict.fromkeys([*cold.timings_s, *warm.timings_s]):
            tasks.append({"case": case, "task": task, "cold_s": cold.timings_s.get(task),
                          "warm_s": warm.timings_s.get(task)})
    return pd.DataFrame(rows), pd.DataFrame(tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["resume", "cache"])
    parser.add_argument("--work", type=Path, help="where runs, caches and the server go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="titanflow-resume-cache-"))
    state = server.start(work / "prefect", port=0)
    env = {**os.environ, "PREFECT_API_URL": state.api_url, "TITANFLOW_HISTORY": str(work / "history")}
    try:
        pd.set_option("display.width", 200)
        if args.only in (None, "resume"):
            print(resume_rows(work, env).to_string(index=False), flush=True)
        if args.only in (None, "cache"):
            table, tasks = cache_rows(work, env)
            print(table.to_string(index=False))
            print(tasks.pivot(index="task", columns="case", values=["cold_s", "warm_s"]).round(1).to_string())
    finally:
        server.stop(work / "prefect")
    print(f"runs and logs: {work}")


if __name__ == "__main__":
    main()
