"""What torchtitan's TensorBoard logger costs a cpu training: CPU seconds with it on (as titanflow renders every
run) against the same launch with it off.

    .venv/bin/python benchmarks/tensorboard_cost.py                 # native, random init, 5 steps, one pair
    .venv/bin/python benchmarks/tensorboard_cost.py --steps 10 --pairs 2

Renders one native cpu job (titanflow.launch.render, the tiny model), then runs its torchrun line (``job/launch.json``)
in turn with the logger on and with ``--metrics.no-enable-tensorboard`` appended (torchtitan's own command-line
override of the rendered config), each in a fresh dump folder. Measures each launch's CPU seconds (user + system of
every process of the launch: ``resource.getrusage(RUSAGE_CHILDREN)`` around it) and wall seconds, and prints one row
per launch and the medians' difference; with the logger on also the event files' bytes and steps, and the median
step time and MFU of steps >= 2 they hold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.assets import ensure_assets  # noqa: E402
from titanflow.launch.event_files import events_table, tb_dir  # noqa: E402
from titanflow.launch.render import render  # noqa: E402
from titanflow.params import ScenarioRun  # noqa: E402

#: The override that turns the logger off (torchtitan's MetricsProcessor.Config.enable_tensorboard).
OFF = ["--metrics.no-enable-tensorboard"]


def launch(job_dir: Path, dump: Path, extra: list[str]) -> dict:
    """One training launch of the rendered job in ``job_dir``, its dump folder emptied first: CPU and wall seconds.

    Raises:
        RuntimeError: the launch failed (its output's tail in the message).
    """
    spec = json.loads((job_dir / "launch.json").read_text())
    shutil.rmtree(dump, ignore_errors=True)
    env = {**os.environ, **spec["env"], "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([*spec["argv"], *extra], env=env, cwd=spec.get("cwd") or REPO, capture_output=True,
                          text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"launch exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    events = sorted(tb_dir(dump).rglob("events.out.tfevents.*"))
    table = events_table(tb_dir(dump)) if events else None
    return {"tensorboard": "off" if extra else "on",
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall_s": wall,
            "event_bytes": sum(p.stat().st_size for p in events),
            "steps_in_events": len(table) if table is not None else 0,
            "step_time_s": float(table[table.step >= 2].step_time_s.median()) if table is not None else float("nan"),
            "mfu_pct": float(table[table.step >= 2].mfu_pct.median()) if table is not None else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tensorboard-cost-"))
    rendered = render(ScenarioRun(steps=args.steps), ensure_assets().weights_dir, work / "run")
    job_dir, dump = Path(rendered.job_path).parent, work / "run" / "train"
    rows = [launch(job_dir, dump, extra) for _ in range(args.pairs) for extra in ([], OFF)]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="%.6g"))
    on, off = (statistics.median(table[table.tensorboard == mode].cpu_s) for mode in ("on", "off"))
    print(f"\nmedian CPU-s: on {on:.2f}, off {off:.2f}, on - off {on - off:+.2f} ({(on - off) / off:+.1%}); "
          f"native cpu random, {args.steps} steps, {args.pairs} pair(s); work folder {work}")


if __name__ == "__main__":
    main()
