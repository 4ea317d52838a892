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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.launch_pairs import alternate, print_comparison, render, work_folder  # noqa: E402
from titanflow.launch.metrics import parse_step_line  # noqa: E402

TUNABLE = "export GLIBC_TUNABLES="


def measure(result: dict) -> dict:
    """A launch's wall, CPU, peak RSS and losses (benchmarks.launch_pairs.launch), and rank 0's tokens/s: the median
    of its step lines from step 2."""
    rows = [row for line in result["lines"] if (row := parse_step_line(line)) is not None]
    return {key: result[key] for key in ("wall_s", "user_s", "sys_s", "peak_rss_gib", "losses")} | {
        "tokens_per_s": statistics.median(r["tps"] for r in rows if r["step"] >= 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="training steps per launch (default 6)")
    parser.add_argument("--pairs", type=int, default=2, help="launches per setting (default 2)")
    parser.add_argument("--work", type=Path, help="where the job and logs go, kept (default: a temporary folder, "
                        "removed at the end)")
    args = parser.parse_args()
    with work_folder(args.work, "titanflow-hugepages-") as work:
        job = render(work, args.steps)
        script = (job / "launch.sh").read_text()
        if TUNABLE not in script:
            raise SystemExit(f"{job / 'launch.sh'} sets no GLIBC_TUNABLES: nothing to compare")
        scripts = {"huge pages": job / "launch.sh", "4 KiB pages": job / "launch-4k.sh"}
        scripts["4 KiB pages"].write_text("".join(line for line in script.splitlines(keepends=True)
                                                  if not line.startswith(TUNABLE)))
        runs = alternate({name: (path, None) for name, path in scripts.items()}, job.parent / "train", work,
                         args.pairs, measure)
    print_comparison(runs, "huge pages", "4 KiB pages", ["wall_s", "user_s", "sys_s", "tokens_per_s", "peak_rss_gib"],
                     args.steps, args.pairs)


if __name__ == "__main__":
    main()
