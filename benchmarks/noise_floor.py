"""How far a workload's performance figures move from run to run with nothing changed: the noise floors of the
performance rules (titanflow/judge/regression_rules.toml).

    .venv/bin/python benchmarks/noise_floor.py history/runs.parquet
    .venv/bin/python benchmarks/noise_floor.py /tmp/*/history/runs.parquet --min-runs 4

Reads one or more history tables (titanflow.record.history; a run kept in several counts once, by run id), takes
every workload (scenario, target, init, config_key) with at least ``--min-runs`` passing runs, and prints per
``history_median`` rule metric (``seconds_<task>`` for ``task_seconds``) the median of its runs and the largest move
from it in the worse direction (lower tokens/s, higher memory and time), in the metric's unit and relative. The last
lines are the largest move per metric over the workloads: a rule's ``noise_floor`` is set at or above it, so that
runs of one unchanged workload never leave it, while a slowdown larger than the floor and the margin still does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.judge.regression import load_rules  # noqa: E402  (the repository's, not an installed copy)


def moves(runs: pd.DataFrame, min_runs: int) -> pd.DataFrame:
    """One row per (workload, metric): runs, median, the largest move in the worse direction (unit, relative)."""
    rules = [r for r in load_rules().rules if r.kind == "history_median"]
    passing = runs[runs.verdict == "pass"].drop_duplicates("run_id")
    rows = []
    for workload, group in passing.groupby(["scenario", "target", "init", "config_key"]):
        if len(group) < min_runs:
            continue
        for rule in rules:
            metrics = sorted(c for c in group if c.startswith("seconds_")) if rule.metric == "task_seconds" \
                else [rule.metric]
            for metric in metrics:
                values = pd.to_numeric(group[metric], errors="coerce").dropna() if metric in group else pd.Series()
                if len(values) < min_runs:
                    continue
                median = values.median()
                worse = (median - values.min()) if rule.direction == "lower_is_worse" else (values.max() - median)
                rows.append({"workload": "/".join(workload), "metric": metric, "runs": len(values), "median": median,
                             "worse_by": worse, "relative": worse / median if median else float("nan")})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", type=Path, help="history tables (runs.parquet)")
    parser.add_argument("--min-runs", type=int, default=4, help="passing runs a workload needs to be measured")
    args = parser.parse_args()
    runs = pd.concat([pd.read_parquet(t) for t in args.tables], ignore_index=True)
    table = moves(runs, args.min_runs)
    if table.empty:
        sys.exit(f"no workload has {args.min_runs} passing runs in {len(args.tables)} table(s)")
    pd.set_option("display.width", 200)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print("\nlargest move in the worse direction per metric:")
    print(table.groupby("metric")[["worse_by", "relative"]].max().to_string(float_format=lambda x: f"{x:.4g}"))


if __name__ == "__main__":
    main()
