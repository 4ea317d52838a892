"""What the cpu target's ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (titan_cfg/targets.py) does to a training.

    .venv/bin/python benchmarks/malloc_hugepages.py              # 6 steps, 2 pairs
    .venv/bin/python benchmarks/malloc_hugepages.py --steps 10 --pairs 3

Renders the native cpu job once (titanflow.launch.render, random init, embedded tiny model), then runs its own
``job/launch.sh`` by ``bash`` as it is (huge pages) and with the ``GLIBC_TUNABLES`` line taken out (4 KiB pages),
alternating, each launch in an empty dump folder. Per launch: wall, user and system CPU seconds of the whole
process tree (``os.wait4`` of bash), the largest process's peak RSS, and rank 0's tokens/s (median of steps >= 2,
torchtitan's step lines, titanflow.launch.metrics). The table gives the medians per setting and their ratio, and
whether the two settings logged the same loss at every step (5 decimals, as torchtitan prints them).

Wall and CPU times are this machine's at the time of the run: compare the rows of one run, not figures of two.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.launch.metrics import log_lines, parse_step_line  # noqa: E402
from titanflow.report.markdown import markdown_table  # noqa: E402

TUNABLE = "export GLIBC_TUNABLES="


def render(work: Path, steps: int) -> Path:
    """The native cpu job (random init, the embedded tiny model, ``steps`` steps) rendered to run, in ``work``;
    returns its job folder (titanflow.launch.render)."""
    from titanflow.assets import ensure_assets
    from titanflow.launch.render import render as render_job
    from titanflow.run.params import ScenarioRun

    weights = ensure_assets().weights_dir
    rendered = render_job(ScenarioRun(scenario="native", target="cpu", steps=steps), weights, work / "native-cpu")
    return Path(rendered.job_path).parent


def launch(script: Path, dump_folder: Path, log: Path) -> dict:
    """Run ``script`` by bash with an empty ``dump_folder``; wall, CPU, peak RSS, tokens/s and losses."""
    shutil.rmtree(dump_folder, ignore_errors=True)
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, env={
            **os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])})
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{script} failed; its output is in {log}")
    rows = [row for line in log_lines(log) if (row := parse_step_line(line)) is not None]
    return {"wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "peak_rss_gib": usage.ru_maxrss / 2**20,
            "tokens_per_s": statistics.median(r["tps"] for r in rows if r["step"] >= 2),
            "losses": [round(r["loss"], 5) for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="training steps per launch (default 6)")
    parser.add_argument("--pairs", type=int, default=2, help="launches per setting (default 2)")
    parser.add_argument("--work", type=Path, help="where the job and logs go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="titanflow-hugepages-"))
    job = render(work, args.steps)
    script = (job / "launch.sh").read_text()
    if TUNABLE not in script:
        raise SystemExit(f"{job / 'launch.sh'} sets no GLIBC_TUNABLES: nothing to compare")
    scripts = {"huge pages": job / "launch.sh", "4 KiB pages": job / "launch-4k.sh"}
    scripts["4 KiB pages"].write_text("".join(line for line in script.splitlines(keepends=True)
                                              if not line.startswith(TUNABLE)))
    dump = job.parent / "train"
    runs: dict[str, list[dict]] = {name: [] for name in scripts}
    for pair in range(args.pairs):
        for name, path in scripts.items():
            runs[name].append(launch(path, dump, work / f"{name.split()[0]}-{pair}.log"))
            print(f"pair {pair + 1}/{args.pairs} {name}: {runs[name][-1]['wall_s']:.1f} s", flush=True)
    rows = []
    for metric in ("wall_s", "user_s", "sys_s", "tokens_per_s", "peak_rss_gib"):
        huge, small = (statistics.median(r[metric] for r in runs[name]) for name in scripts)
        rows.append({"measure": metric, "4 KiB pages": f"{small:.2f}", "huge pages": f"{huge:.2f}",
                     "huge / 4 KiB": f"{huge / small:.2f}"})
    same = all(r["losses"] == runs["4 KiB pages"][0]["losses"] for name in scripts for r in runs[name])
    print(f"\nnative cpu, {args.steps} steps, 2 ranks, {args.pairs} launch(es) per setting, medians "
          f"({time.strftime('%Y-%m-%d')}):\n")
    print(markdown_table(rows))
    print(f"\nlosses equal at every step in every launch: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
