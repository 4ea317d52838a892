"""One node of two ranks against two nodes of one rank, side by side (docs/many-nodes.md).

    .venv/bin/python benchmarks/slurm_nodes.py          # about 4 minutes on 2 cores; needs slurm-wlm and munge

Both rows are ``titanflow run native --target cpu`` of the golden workload (10 steps, global batch 4, seed 0),
against one local Prefect server started here: ``1 node x 2 ranks`` is torchrun --standalone on this machine;
``2 nodes x 1 rank`` adds ``--nnodes 2 --nproc-per-node 1`` and runs as one Slurm job on a two-node cluster on
loopback started here (titanflow.launch.slurm.cluster; both nodes are this machine's 2 cores). Printed: each step's
loss for both and whether they are equal at torchtitan's 5 decimals, then per row the wall time of the command,
the train task's time (submission or launch to exit) and the tokens/s the run measured.

Wall times are this machine's at the time of the run: compare the rows of one run, not figures of two.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.launch.slurm import cluster  # noqa: E402
from titanflow.prefect_ops.local_server import temporary_server  # noqa: E402
from titanflow.record.summary import read_summary  # noqa: E402

TITANFLOW = REPO / ".venv" / "bin" / "titanflow"
#: Row name -> extra options of ``titanflow run native --target cpu``.
LAYOUTS = {"1 node x 2 ranks": [], "2 nodes x 1 rank": ["--nnodes", "2", "--nproc-per-node", "1"]}


def run(name: str, options: list[str], runs: Path, env: dict[str, str]) -> dict:
    """One ``titanflow run``; returns its wall time (s), train task time (s), tokens/s and losses.

    Raises:
        RuntimeError: the command failed, with its output's tail.
    """
    run_id = name.replace(" ", "-")
    started = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(runs), "--run-id",
                           run_id, *options], env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode:
        raise RuntimeError(f"{name}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = read_summary(runs / run_id / "summary.json")
    return {"wall_s": wall, "train_s": summary.train.wall_s, "tokens_per_s": summary.train.tokens_per_s,
            "losses": summary.losses}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="slurm-nodes-"))
    # the server and the runs keep their state here, not in ~/.prefect
    os.environ.update(PREFECT_HOME=str(work / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    folder = Path(tempfile.mkdtemp(prefix="titanflow-slurm-bench-", dir="/tmp"))  # reachable by the munge user
    running = cluster.up(folder, tie_to_caller=True)
    try:
        with temporary_server(work / "prefect-server.log") as api_url:
            env = {**os.environ, **running.env(), "PREFECT_API_URL": api_url, "TITANFLOW_HISTORY": str(work / "history")}
            rows = {name: run(name, options, work / "runs", env) for name, options in LAYOUTS.items()}
    finally:
        cluster.down(folder)
    one, two = (rows[name] for name in LAYOUTS)
    steps = pd.DataFrame({"step": range(1, len(one["losses"]) + 1), "1 node x 2 ranks": one["losses"],
                          "2 nodes x 1 rank": two["losses"]})
    steps["equal (5 decimals)"] = [f"{a:.5f}" == f"{b:.5f}" for a, b in zip(one["losses"], two["losses"])]
    print(steps.to_string(index=False, float_format=lambda x: f"{x:.5f}"))
    times = pd.DataFrame([{"layout": name, "wall s": r["wall_s"], "train task s": r["train_s"],
                           "tokens/s": r["tokens_per_s"]} for name, r in rows.items()])
    print()
    print(times.to_string(index=False, float_format=lambda x: f"{x:.1f}"))


if __name__ == "__main__":
    main()
