"""How far cpu loss curves move across numerics environments: the band goldens are held to elsewhere.

    .venv/bin/python benchmarks/golden_band.py                      # avx2 and default vs this machine
    .venv/bin/python benchmarks/golden_band.py --isa avx2 --scenario moe --init pretrained

Runs ``titanflow run <scenario> --target cpu --init <init>`` (default parameters: the goldens'
workload) with torch, MKL and oneDNN held to an older instruction set, the way a machine without
AVX-512 runs them (``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``),
each ISA with its own cache folder, so the pretrained tiny checkpoints are built again there as
another machine would build them. Prints, per (scenario, init, ISA), the first-step loss, the
independent first-step expectation (titanflow.judge.first_step), the golden's step 1, and the
largest |run - golden| over the curve; the last line is the largest gap per init, from which
``golden_curve``'s ``band`` (titanflow/judge/regression_rules.toml) is set with margin.
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
from titanflow.judge.goldens import golden_for  # noqa: E402

#: ISA name -> the environment that holds torch (ATen), MKL and oneDNN to it.
ISA_ENV = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


def run_once(scenario: str, init: str, isa: str, work: Path) -> dict:
    """One ``titanflow run`` under ``isa``; returns its summary.json as a dict."""
    runs = work / isa / "runs" / f"{scenario}-{init}"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | ISA_ENV[isa] | {
        "TITANFLOW_CACHE": str(work / isa / "cache"), "TITANFLOW_HISTORY": str(work / isa / "history")}
    proc = subprocess.run([str(REPO / ".venv/bin/titanflow"), "run", scenario, "--target", "cpu", "--init", init,
                           "--runs-dir", str(runs)], capture_output=True, text=True, env=env, cwd=REPO)
    (summary,) = runs.glob("*/summary.json")
    data = json.loads(summary.read_text())
    data["returncode"] = proc.returncode
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", action="append", choices=sorted(ISA_ENV))
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    parser.add_argument("--init", action="append", choices=["random", "pretrained"])
    parser.add_argument("--work", type=Path, help="where runs and caches go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="golden-band-"))
    rows = []
    for init in args.init or ["random", "pretrained"]:
        for scenario in args.scenario or list(SCENARIOS):
            golden = golden_for(scenario, "cpu", init, None)
            for isa in args.isa or ["avx2", "default"]:
                data = run_once(scenario, init, isa, work)
                losses = (data.get("train") or {}).get("losses") or []
                gaps = [abs(x - golden.losses[s]) for s, x in enumerate(losses, 1) if s in golden.losses]
                independent = ((data.get("loss") or {}).get("independent") or {}).get("loss")
                rows.append({"scenario": scenario, "init": init, "isa": isa, "verdict": data.get("verdict"),
                             "first_step": losses[0] if losses else None, "independent": independent,
                             "golden_step_1": golden.losses[1], "max_gap": max(gaps) if gaps else None,
                             "worst_step": 1 + gaps.index(max(gaps)) if gaps else None,
                             "weights_digest": data.get("weights_digest")})
                print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    table = pd.DataFrame(rows)
    print("\n" + table.to_string(index=False))
    print("\nlargest |run - golden| per init (nats):")
    print(table.groupby("init")["max_gap"].max().to_string())
    print(f"\nruns and caches: {work}")


if __name__ == "__main__":
    main()
