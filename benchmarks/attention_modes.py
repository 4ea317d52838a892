"""What the attention mode does to the cpu loss curves: torchtitan's document mask against the packed row.

    .venv/bin/python benchmarks/attention_modes.py                     # every scenario x init, 10 steps
    .venv/bin/python benchmarks/attention_modes.py --scenario native --init random

Runs ``titanflow run <scenario> --target cpu --init <init>`` twice with default parameters (the goldens'
workload, 10 steps), once as the cpu target has it (``attention=sdpa``: torchtitan 0.3.0's per-document positions
and block-causal document mask) and once with ``--kernels attention=causal`` (the packed row as one sequence:
causal over the row, RoPE positions 0..L-1, as the walkthrough's Neuron fork and the trn2 target train), nothing
else changed. Prints one row per step with both losses and their difference, then per (scenario, init) the largest
|difference| and the step it is at. The runs share the cache (the pretrained tiny checkpoints are built once) and
write their history into the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titan_cfg.scenarios import SCENARIOS  # noqa: E402

#: Mode name -> the options of its run (the attention implementation, titan_cfg.kernels).
MODES = {"document": [], "row": ["--kernels", "attention=causal"]}


def losses_of(scenario: str, init: str, mode: str, work: Path) -> list[float]:
    """The per-step losses (nats) of one ``titanflow run`` in ``mode``.

    Raises:
        RuntimeError: the run failed (its last output lines are in the message).
    """
    runs = work / "runs" / f"{scenario}-{init}-{mode}"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"TITANFLOW_HISTORY": str(work / "history")}
    proc = subprocess.run([str(REPO / ".venv/bin/titanflow"), "run", scenario, "--target", "cpu", "--init", init,
                           "--runs-dir", str(runs), *MODES[mode]], capture_output=True, text=True, env=env, cwd=REPO)
    summaries = list(runs.glob("*/summary.json"))
    losses = ((json.loads(summaries[0].read_text()).get("train") or {}).get("losses") or []) if summaries else []
    if not losses:
        raise RuntimeError(f"{scenario} {init} {mode}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    parser.add_argument("--init", action="append", choices=["random", "pretrained"])
    parser.add_argument("--work", type=Path, help="where runs and history go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="attention-modes-"))
    rows = []
    for init in args.init or ["random", "pretrained"]:
        for scenario in args.scenario or list(SCENARIOS):
            curves = {mode: losses_of(scenario, init, mode, work) for mode in MODES}
            for step, (document, row) in enumerate(zip(curves["document"], curves["row"]), 1):
                rows.append({"scenario": scenario, "init": init, "step": step, "document": document, "row": row,
                             "row - document": row - document})
            print(pd.DataFrame(rows[-len(curves["row"]):]).to_string(index=False, float_format="%.5f"), flush=True)
    table = pd.DataFrame(rows)
    table["abs"] = table["row - document"].abs()
    worst = table.loc[table.groupby(["scenario", "init"], sort=False)["abs"].idxmax(),
                      ["scenario", "init", "step", "row - document"]]
    print("\nlargest |row - document| per scenario and init (nats), at the step shown:")
    print(worst.to_string(index=False, float_format="%.5f"))
    print(f"\nruns: {work}")


if __name__ == "__main__":
    main()
